#pragma once
// The request side of the Anthropic Messages API (POST /v1/messages, /v1/messages/count_tokens):
// a body is checked and translated into chat messages in the OpenAI shape (system, text,
// tool_use → tool_calls, tool_result → tool messages, thinking → reasoning_content) and tools
// (input_schema → parameters). No engine, no template: the handlers are in anthropic_api.cpp.
#include <string>

#include "engine/engine.h"
#include "server/chat_tools.h"
#include "server/request.h"

namespace mla::server {

// {"type": "error", "error": {"type": "invalid_request_error", "message": ...}}
json anthropic_error_json(const ApiError& e);

struct AnthropicRequest {
  std::string model;
  json messages = json::array();  // chat-template messages (OpenAI shape)
  json tools;                     // null or OpenAI-shaped tools
  ChatToolOptions tool_options;
  json chat_template_kwargs = json::object();
  bool continue_final_message = false;  // the last message is the assistant's (a prefill)
  SamplingParams params;
  bool stream = false;
};

// Throws ApiError (400) naming the field. count_only: /count_tokens (no max_tokens needed).
AnthropicRequest parse_anthropic_request(const json& body, const ModelLimits& limits, bool count_only);

}  // namespace mla::server
