#pragma once
// The Anthropic Messages API (POST /v1/messages, /v1/messages/count_tokens) over the same
// engine, chat template and output parsers as the OpenAI chat endpoint: a request is translated
// into chat messages by anthropic_protocol.h, run as a GenerationJob and written by
// anthropic_response.h. Errors on every /v1/messages path take Anthropic's shape.
#include <memory>

namespace mla::server {

class HttpResponder;
class Router;
class ServerState;
struct HttpRequest;

// Adds the routes above to router; state must outlive it.
void register_anthropic_routes(Router& router, ServerState& state);

// Whether a request comes from an Anthropic client (it sends `anthropic-version`): GET /v1/models
// answers it in Anthropic's shape.
bool is_anthropic_request(const HttpRequest& req);
// GET /v1/models (one page: the served model) or /v1/models/{id} (its ModelInfo: type "model",
// id, display_name, created_at in RFC 3339, lifecycle, max_input_tokens) in Anthropic's shape;
// errors too.
void send_anthropic_models(const ServerState& state, const HttpRequest& req, const std::shared_ptr<HttpResponder>& res);

}  // namespace mla::server
