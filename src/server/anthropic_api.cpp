// The Anthropic Messages API routes (see anthropic_api.h).
#include "server/anthropic_api.h"

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

}  // namespace

void register_anthropic_routes(Router& router, ServerState& state) {
  router.set_error_shape("/v1/messages", anthropic_error_json);
  router.add("POST", "/v1/messages",
             [&state](const HttpRequest& req, const Responder& res) { handle_messages(state, req, res); });
  router.add("POST", "/v1/messages/count_tokens",
             [&state](const HttpRequest& req, const Responder& res) { handle_count_tokens(state, req, res); });
}

}  // namespace mla::server
