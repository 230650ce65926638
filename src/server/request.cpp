// What every protocol's request side shares (see request.h).
#include "server/request.h"

#include <fmt/format.h>

#include "server/json_limits.h"

namespace mla::server {

json parse_json_object(std::string_view body) {
  if (!json_depth_ok(body))
    bad_request(fmt::format("request body nests arrays and objects deeper than {} levels", kMaxJsonDepth), "",
                "invalid_json");
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {  // a syntax error (with its byte position) or a number overflow
    bad_request(fmt::format("request body is not valid JSON: {}", e.what()), "", "invalid_json");
  }
  if (!j.is_object())
    bad_request(fmt::format("request body must be a JSON object, got {}", j.type_name()), "", "invalid_json");
  return j;
}

void check_context_length(int prompt_len, std::optional<int> max_tokens, int max_model_len) {
  if (prompt_len < 1) bad_request("the prompt is empty (0 tokens)", "prompt");
  if (prompt_len > max_model_len)
    bad_request(fmt::format("the prompt is {} tokens long, over this model's maximum context "
                            "length of {} tokens",
                            prompt_len, max_model_len),
                "prompt", "context_length_exceeded");
  if (max_tokens && static_cast<int64_t>(prompt_len) + *max_tokens > max_model_len)
    bad_request(fmt::format("this model's maximum context length is {} tokens, but {} tokens were "
                            "requested ({} in the prompt + {} max_tokens for the completion)",
                            max_model_len, static_cast<int64_t>(prompt_len) + *max_tokens, prompt_len, *max_tokens),
                "max_tokens", "context_length_exceeded");
}

}  // namespace mla::server
