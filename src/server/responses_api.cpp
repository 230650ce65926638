// The Responses API route (see responses_api.h).
#include "server/responses_api.h"

#include "server/generation_job.h"
#include "server/openai_api.h"
#include "server/responses_protocol.h"
#include "server/responses_response.h"
#include "server/router.h"
#include "server/server_state.h"

namespace mla::server {
namespace {

using Responder = std::shared_ptr<HttpResponder>;

void handle_responses(ServerState& state, const HttpRequest& req, const Responder& res) {
  state.require_ready();
  const ServedModel& model = state.model();
  json body = parse_json_object(req.body);
  // Any model name is served (Codex and the Agents SDK send their own model names).
  ResponsesRequest rr = parse_responses_request(body);
  ChatRequest cr = parse_chat_request(rr.chat_body, {model.n_vocab, model.max_model_len});
  if (cr.structured) cr.structured->param = "text.format";
  PreparedChat chat = prepare_chat(model, rr.chat_body, cr);
  JobRequest job{make_tool_call_id("resp_"), rr.stream, {}, cr.params};
  job.prompts.push_back(std::move(chat.ids));
  auto writer = std::make_unique<ResponsesWriter>(
      job.id, unix_now(), state.config().served_model_name, std::move(rr.echo), rr.stream, std::move(chat.parsing),
      [&model](const std::string& text) { return static_cast<int64_t>(tokenize(model, text, false).size()); });
  GenerationJob::start(state.job_services(), res, std::move(job), std::move(writer));
}

}  // namespace

void register_responses_routes(Router& router, ServerState& state) {
  router.add("POST", "/v1/responses",
             [&state](const HttpRequest& req, const Responder& res) { handle_responses(state, req, res); });
}

}  // namespace mla::server
