// The state every route shares, and the server's own routes (see server_state.h).
#include "server/server_state.h"

#include <chrono>

#include "server/router.h"

namespace mla::server {

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

ServerState::ServerState(ApiConfig config) : config_(std::move(config)), started_at_(unix_now()) {}

void ServerState::set_model(ServedModel model) {
  model_ = std::move(model);
  ready_ = true;
}

void ServerState::require_ready() const {
  if (shutting_down_) throw ApiError(503, "the server is shutting down", "", "shutting_down");
  if (!ready_) throw ApiError(503, "the model is still loading; retry when /health is 200", "", "loading");
}

void register_server_routes(Router& router, ServerState& state) {
  router.add(
      "GET", "/health",
      [&state](const HttpRequest&, const std::shared_ptr<HttpResponder>& res) {
        const bool stopping = state.shutting_down();
        if (!state.ready() || stopping)
          throw ApiError(503, stopping ? "shutting down" : "the model is loading", "",
                         stopping ? "shutting_down" : "loading");
        res->send(200, "application/json", "{}");
      },
      Router::Access::kPublic);
  router.add(
      "GET", "/metrics",
      [&state](const HttpRequest&, const std::shared_ptr<HttpResponder>& res) {
        EngineCounters c;
        if (state.ready()) c = state.model().engine->counters();
        res->send(200, std::string(kPrometheusContentType),
                  state.metrics().render(c, state.config().served_model_name));
      },
      Router::Access::kPublic);
  router.add("GET", "/version", [](const HttpRequest&, const std::shared_ptr<HttpResponder>& res) {
    send_json(*res, 200, {{"version", MLA_VERSION}});
  });
}

}  // namespace mla::server
