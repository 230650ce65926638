#pragma once
// The HTTP layer's dispatch: method + path → handler. The router answers what no handler does:
// 401 without the API key, 404 for an unknown path, 405 for a known path with another method
// (with an Allow header), and turns whatever a handler throws into an error response in the
// shape of the protocol that owns the path. Protocol modules (openai_api.h, anthropic_api.h)
// register their routes on it; the router knows none of them.
//
//   Router router(api_key);
//   register_server_routes(router, state);   // /health, /metrics, /version
//   register_openai_routes(router, state);
//   HttpServer http(cfg, [&router](HttpRequest&& r, auto res) { router.handle(std::move(r), res); });
//
// Routes are registered before the server starts; handle() may then run on any thread.
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/api_error.h"
#include "server/http_server.h"
#include "server/json.h"

namespace mla::server {

// A JSON response (Content-Type application/json).
void send_json(HttpResponder& res, int status, const json& body,
               std::vector<std::pair<std::string, std::string>> headers = {});

class Router {
 public:
  // Answers through res, now or later (from any thread). Throws ApiError (or mla::Error: 400) to
  // answer with an error.
  using Handler = std::function<void(const HttpRequest& req, const std::shared_ptr<HttpResponder>& res)>;
  // An error's response body in a protocol's shape.
  using ErrorShape = std::function<json(const ApiError& e)>;
  // kPublic: served without the API key (/health, /metrics).
  enum class Access { kKeyRequired, kPublic };

  // api_key "": no route needs a key. The key is accepted as "Authorization: Bearer KEY" or
  // "x-api-key: KEY" (Anthropic's clients).
  explicit Router(std::string api_key);

  // The path exactly.
  void add(std::string_view method, const std::string& path, Handler handler, Access access = Access::kKeyRequired);
  // Every path that starts with prefix and is longer (a trailing parameter: "/v1/models/" for
  // /v1/models/{name}). Exact paths are matched first.
  void add_prefix(std::string_view method, const std::string& prefix, Handler handler);
  // Errors on paths that start with prefix (registered or not) take this shape; elsewhere
  // ApiError::to_json, {"error": {...}}. A 405 takes ApiError::to_json on every path.
  void set_error_shape(std::string prefix, ErrorShape shape);

  // The HttpHandler.
  void handle(HttpRequest&& req, const std::shared_ptr<HttpResponder>& res) const;

 private:
  struct Method {
    std::string name;
    Handler handler;
  };
  // The handlers of one path (or one prefix), by method.
  struct Route {
    std::string path;
    bool is_public = false;
    std::vector<Method> methods;
  };

  void dispatch(const HttpRequest& req, const std::shared_ptr<HttpResponder>& res) const;
  void check_key(const HttpRequest& req) const;
  const Route* find(const std::string& path) const;
  static Route& route_in(std::vector<Route>& routes, const std::string& path);

  std::string api_key_;
  std::vector<Route> exact_;
  std::vector<Route> prefixed_;
  std::vector<std::pair<std::string, ErrorShape>> error_shapes_;
};

}  // namespace mla::server
