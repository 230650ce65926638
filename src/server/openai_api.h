#pragma once
// The OpenAI-compatible API, as vLLM serves it: /v1/completions, /v1/chat/completions,
// /v1/models, /v1/models/{name}, /tokenize, /detokenize. Requests are parsed by
// openai_protocol.h, run as GenerationJobs and written by openai_response.h.
#include <cstdint>
#include <vector>

#include "server/chat_output.h"
#include "server/chat_tools.h"
#include "server/openai_protocol.h"
#include "server/served_model.h"

namespace mla::server {

class Router;
class ServerState;

// Adds the routes above to router; state must outlive it.
void register_openai_routes(Router& router, ServerState& state);

// A parsed chat request made ready for the engine, as /v1/chat/completions runs it (the Responses
// API renders its input items as chat messages and runs them through here too).
// NOLINTNEXTLINE(bugprone-exception-escape): the implicit moves of its vectors and json do not throw
struct PreparedChat {
  std::vector<int32_t> ids;  // the rendered prompt
  OutputParsing parsing;     // tool calls and reasoning to parse out of the output
  ChatToolOptions tool_options;
};
// body: the chat body cr was parsed from. Checks tools/tool_choice, compiles cr's output
// constraint, renders and tokenizes the prompt, checks the context (max_tokens defaults to what
// is left of it) and constrains the output to tool calls when tool_choice requires one. 400s
// name the field.
PreparedChat prepare_chat(const ServedModel& model, const json& body, ChatRequest& cr);

}  // namespace mla::server
