#pragma once
// The Anthropic Messages API (POST /v1/messages, /v1/messages/count_tokens) over the same
// engine, chat template and output parsers as the OpenAI chat endpoint: a request is translated
// into chat messages by anthropic_protocol.h, run as a GenerationJob and written by
// anthropic_response.h. Errors on every /v1/messages path take Anthropic's shape.
namespace mla::server {

class Router;
class ServerState;

// Adds the routes above to router; state must outlive it.
void register_anthropic_routes(Router& router, ServerState& state);

}  // namespace mla::server
