// The Anthropic Messages API routes (see anthropic_api.h).
#include "server/anthropic_api.h"

#include <fmt/format.h>

#include <ctime>
#include <string_view>

#include "server/anthropic_protocol.h"
#include "server/anthropic_response.h"
#include "server/generation_job.h"
#include "server/request.h"
#include "server/router.h"
#include "server/server_state.h"

namespace mla::server {
namespace {

using Responder = std::shared_ptr<HttpResponder>;

// The request's chat prompt, rendered as /v1/chat/completions renders one.
std::string render_messages(const ServedModel& model, const AnthropicRequest& ar) {
  return render_chat(
      model, {ar.messages, ar.tools, ar.chat_template_kwargs, !ar.continue_final_message, ar.continue_final_message});
}

void handle_messages(ServerState& state, const HttpRequest& req, const Responder& res) {
  state.require_ready();
  const ServedModel& model = state.model();
  json body = parse_json_object(req.body);
  // Any model name is served (clients of this API ask for their own model names).
  AnthropicRequest ar = parse_anthropic_request(body, {model.n_vocab, model.max_model_len}, false);
  const std::string text = render_messages(model, ar);
  std::vector<int32_t> ids = tokenize_chat(model, text);
  check_context_length(static_cast<int>(ids.size()), ar.params.max_tokens, model.max_model_len);
  OutputParsing parsing = output_parsing(model.parsers, ar.tools, ar.tool_options, ar.chat_template_kwargs, text);
  if (parsing.active()) ar.params.skip_special_tokens = false;
  if (ar.tool_options.requires_call()) constrain_to_tool_calls(model, ar.params, parsing, ar.tools, ar.tool_options);
  JobRequest job{make_tool_call_id("msg_"), ar.stream, {}, ar.params};
  job.prompts.push_back(std::move(ids));
  auto writer =
      std::make_unique<AnthropicWriter>(job.id, state.config().served_model_name, ar.stream, std::move(parsing));
  GenerationJob::start(state.job_services(), res, std::move(job), std::move(writer));
}

void handle_count_tokens(const ServerState& state, const HttpRequest& req, const Responder& res) {
  state.require_ready();
  const ServedModel& model = state.model();
  json body = parse_json_object(req.body);
  AnthropicRequest ar = parse_anthropic_request(body, {model.n_vocab, model.max_model_len}, true);
  send_json(*res, 200, {{"input_tokens", tokenize_chat(model, render_messages(model, ar)).size()}});
}

// unix seconds → "2026-01-31T12:00:00Z".
std::string rfc3339(int64_t unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec);
}

json model_info(const ServerState& state) {
  const std::string& name = state.config().served_model_name;
  json info = {{"type", "model"},
               {"id", name},
               {"display_name", name},
               {"created_at", rfc3339(state.started_at())},
               {"lifecycle", "active"}};
  if (state.ready()) info["max_input_tokens"] = state.model().max_model_len;
  return info;
}

// Whether the query string names `key` (the list's after_id / before_id cursors).
bool query_has(std::string_view target, std::string_view key) {
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return false;
  for (std::string_view rest = target.substr(q + 1); !rest.empty();) {
    const size_t amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    if (pair.substr(0, pair.find('=')) == key) return true;
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
  }
  return false;
}

void answer_models(const ServerState& state, const HttpRequest& req, const Responder& res) {
  constexpr std::string_view kPrefix = "/v1/models/";
  if (req.path.starts_with(kPrefix)) {
    const std::string id = req.path.substr(kPrefix.size());
    const std::string& served = state.config().served_model_name;
    if (id != served)
      throw ApiError(404, fmt::format("the model '{}' does not exist (this server serves '{}')", id, served), "model",
                     "model_not_found");
    return send_json(*res, 200, model_info(state));
  }
  // One model: the page after or before it (a cursor given) is empty.
  json data = json::array();
  if (!query_has(req.target, "after_id") && !query_has(req.target, "before_id")) data.push_back(model_info(state));
  json first = data.empty() ? json(nullptr) : data.front()["id"];
  send_json(*res, 200, {{"data", data}, {"has_more", false}, {"first_id", first}, {"last_id", first}});
}

}  // namespace

bool is_anthropic_request(const HttpRequest& req) { return !req.header("anthropic-version").empty(); }

void send_anthropic_models(const ServerState& state, const HttpRequest& req, const Responder& res) {
  try {
    answer_models(state, req, res);
  } catch (const ApiError& e) {
    send_json(*res, e.status(), anthropic_error_json(e));
  }
}

void register_anthropic_routes(Router& router, ServerState& state) {
  router.set_error_shape("/v1/messages", anthropic_error_json);
  router.add("POST", "/v1/messages",
             [&state](const HttpRequest& req, const Responder& res) { handle_messages(state, req, res); });
  router.add("POST", "/v1/messages/count_tokens",
             [&state](const HttpRequest& req, const Responder& res) { handle_count_tokens(state, req, res); });
}

}  // namespace mla::server
