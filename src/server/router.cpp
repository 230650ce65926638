// Method + path → handler, with the answers no handler gives (see router.h).
#include "server/router.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "server/auth.h"
#include "server/sse.h"
#include "util/error.h"
#include "util/log.h"

namespace mla::server {

void send_json(HttpResponder& res, int status, const json& body,
               std::vector<std::pair<std::string, std::string>> headers) {
  res.send(status, "application/json", dump_json(body), std::move(headers));
}

Router::Router(std::string api_key) : api_key_(std::move(api_key)) {}

Router::Route& Router::route_in(std::vector<Route>& routes, const std::string& path) {
  auto it = std::find_if(routes.begin(), routes.end(), [&](const Route& r) { return r.path == path; });
  if (it != routes.end()) return *it;
  routes.push_back(Route{path, false, {}});
  return routes.back();
}

void Router::add(std::string_view method, const std::string& path, Handler handler, Access access) {
  Route& r = route_in(exact_, path);
  r.is_public = r.is_public || access == Access::kPublic;
  r.methods.push_back(Method{std::string(method), std::move(handler)});
}

void Router::add_prefix(std::string_view method, const std::string& prefix, Handler handler) {
  route_in(prefixed_, prefix).methods.push_back(Method{std::string(method), std::move(handler)});
}

void Router::set_error_shape(std::string prefix, ErrorShape shape) {
  error_shapes_.emplace_back(std::move(prefix), std::move(shape));
}

const Router::Route* Router::find(const std::string& path) const {
  for (const Route& r : exact_)
    if (r.path == path) return &r;
  for (const Route& r : prefixed_)
    if (path.size() > r.path.size() && path.starts_with(r.path)) return &r;
  return nullptr;
}

void Router::handle(HttpRequest&& req, const std::shared_ptr<HttpResponder>& res) const {
  auto fail = [&](const ApiError& e) {
    const ErrorShape* shape = nullptr;
    size_t matched = 0;  // the longest prefix wins
    for (const auto& [prefix, s] : error_shapes_) {
      if (req.path.starts_with(prefix) && prefix.size() >= matched) {
        shape = &s;
        matched = prefix.size();
      }
    }
    send_json(*res, e.status(), shape ? (*shape)(e) : e.to_json());
  };
  try {
    dispatch(req, res);
  } catch (const ApiError& e) {
    if (e.status() >= 500) log().warn("api: {} {}: {}", req.method, req.path, e.what());
    fail(e);
  } catch (const Error& e) {
    fail(ApiError(400, e.what()));
  } catch (const std::exception& e) {
    log().error("api: {} {}: internal error: {}", req.method, req.path, e.what());
    fail(ApiError(500, fmt::format("internal error: {}", e.what()), "", "internal_error"));
  }
}

void Router::check_key(const HttpRequest& req) const {
  if (api_key_.empty() || authorized(req.header("Authorization"), api_key_)) return;
  const std::string_view x_api_key = req.header("x-api-key");
  if (!x_api_key.empty() && constant_time_equals(x_api_key, api_key_)) return;
  throw ApiError(401,
                 "missing or invalid API key (send 'Authorization: Bearer <key>' or "
                 "'x-api-key: <key>')",
                 "", "invalid_api_key");
}

void Router::dispatch(const HttpRequest& req, const std::shared_ptr<HttpResponder>& res) const {
  const Route* route = find(req.path);
  // The key is checked before the path: without it, every path but a public one is a 401.
  if (!route || !route->is_public) check_key(req);
  if (!route) throw ApiError(404, fmt::format("no route for {} {}", req.method, req.path), "", "not_found");
  std::vector<std::string_view> allowed;
  for (const Method& m : route->methods) {
    if (m.name == req.method) return m.handler(req, res);
    allowed.push_back(m.name);
  }
  const std::string allow = fmt::format("{}", fmt::join(allowed, ", "));
  const ApiError e(405, fmt::format("method {} is not allowed for {} (use {})", req.method, req.path, allow), "",
                   "method_not_allowed");
  send_json(*res, e.status(), e.to_json(), {{"Allow", allow}});
}

}  // namespace mla::server
