#pragma once
// The OpenAI Responses API (POST /v1/responses) over the chat path: a request is translated into
// a chat completions request by responses_protocol.h, run through the same chat template, tool
// and reasoning parsers and constraints as /v1/chat/completions (openai_api.h's prepare_chat), as
// a GenerationJob written by responses_response.h. Nothing is stored (see responses_protocol.h).
namespace mla::server {

class Router;
class ServerState;

// Adds the route above to router; state must outlive it.
void register_responses_routes(Router& router, ServerState& state);

}  // namespace mla::server
