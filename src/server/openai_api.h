#pragma once
// The OpenAI-compatible API, as vLLM serves it: /v1/completions, /v1/chat/completions,
// /v1/models, /v1/models/{name}, /tokenize, /detokenize. Requests are parsed by
// openai_protocol.h, run as GenerationJobs and written by openai_response.h.
namespace mla::server {

class Router;
class ServerState;

// Adds the routes above to router; state must outlive it.
void register_openai_routes(Router& router, ServerState& state);

}  // namespace mla::server
