#pragma once
// The request side of the OpenAI Responses API (POST /v1/responses): a body is checked and
// translated into the /v1/chat/completions body it means, so it runs through the chat path
// (openai_protocol's parse_chat_request, the chat template, the tool and reasoning parsers).
// `input` items → chat messages (message → its role's message; reasoning, assistant messages and
// function_call items of one turn → one assistant message with reasoning_content and tool_calls;
// function_call_output → a tool message); `instructions` → a system message first; function
// tools → chat tools; tool_choice, max_output_tokens, temperature, top_p, parallel_tool_calls,
// text.format (json_schema / json_object → response_format), reasoning.effort → the template's
// thinking switches. No engine, no template: the handler is in responses_api.cpp.
//
// Nothing is stored: `previous_response_id` is refused (400) and `store` is answered false.
#include <string>

#include "server/json.h"

namespace mla::server {

struct ResponsesRequest {
  json chat_body;  // the same request as a /v1/chat/completions body
  // The request fields a Response object repeats (instructions, max_output_tokens, tools, ...),
  // in the Response's shape.
  json echo = json::object();
  bool stream = false;
};

// Throws ApiError (400) naming the field (`input`, `tools`, `text.format`, ...).
ResponsesRequest parse_responses_request(const json& body);

}  // namespace mla::server
