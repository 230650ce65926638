#pragma once
// What the request side of every protocol shares: the model's limits a request is checked
// against, the JSON body, and the context-length check. Errors are 400 ApiErrors naming the field.
#include <optional>
#include <string_view>

#include "server/api_error.h"
#include "server/json.h"

namespace mla::server {

// What validation needs to know about the model.
struct ModelLimits {
  int n_vocab = 0;
  int max_model_len = 0;
};

// Parses a JSON body; 400 (code "invalid_json") on a syntax error, a nesting deeper than
// kMaxJsonDepth, or when it is not an object.
json parse_json_object(std::string_view body);

// 400 unless prompt_len >= 1 and prompt_len + max_tokens <= max_model_len; the message says
// both numbers. max_tokens nullopt: only the prompt is checked.
void check_context_length(int prompt_len, std::optional<int> max_tokens, int max_model_len);

}  // namespace mla::server
