#pragma once
// OpenAI request parsing and validation (JSON → engine SamplingParams) and response shaping
// (engine outputs → the completions / chat JSON shapes), with no I/O: the HTTP handlers in
// openai_api.cpp put these together, the unit tests call them directly.
//
// Parsing rules (as vLLM): unknown fields are ignored; a null field means "not given"; a field of
// the wrong type or out of range is a 400 ApiError naming the field.

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "engine/engine.h"
#include "grammar/grammar.h"
#include "server/api_error.h"
#include "server/json.h"
#include "server/json_limits.h"
#include "server/request.h"

namespace mla::server {

// A request's output constraint (response_format or structured_outputs) before it is compiled.
struct StructuredOutput {
  GrammarSpec spec;
  std::string param;  // the field it came from, for errors: "response_format" | "structured_outputs"
};

// One completions prompt: text to tokenize, or token ids.
struct PromptInput {
  bool is_text = true;
  std::string text;
  std::vector<int32_t> ids;
};

struct CompletionRequest {
  std::string model;                           // "" when absent
  std::vector<PromptInput> prompts;            // >= 1
  SamplingParams params;                       // params.max_tokens: 16 unless given
  std::optional<StructuredOutput> structured;  // response_format / structured_outputs
  // echo: each choice starts with its prompt; with logprobs, the prompt tokens' logprobs lead the
  // choice's (the first token's null). max_tokens 0 is allowed with echo: the prompt is scored.
  bool echo = false;
  std::optional<int> prompt_logprobs;  // vLLM's extra field: each choice's "prompt_logprobs"
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::string user;
};

struct ChatRequest {
  std::string model;
  json messages;  // normalized: [{"role", "content": string|null, ...}]
  json tools;     // null or array, passed to the template
  json chat_template_kwargs = json::object();
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  SamplingParams params;
  std::optional<StructuredOutput> structured;  // response_format / structured_outputs
  std::optional<int> max_tokens;               // nullopt: what is left of the context
  bool logprobs = false;                       // then params.logprobs = top_logprobs
  std::optional<int> prompt_logprobs;          // vLLM's extra field: the response's "prompt_logprobs"
  bool stream = false;
  bool include_usage = false;
  std::string user;
};

// Both throw ApiError (400). body must be a JSON object.
CompletionRequest parse_completion_request(const json& body, const ModelLimits& limits);
ChatRequest parse_chat_request(const json& body, const ModelLimits& limits);

// /tokenize body: "prompt" or "messages" (+ chat options), "add_special_tokens".
struct TokenizeRequest {
  std::string model;
  bool is_chat = false;
  std::string prompt;
  json messages;
  json tools;
  json chat_template_kwargs = json::object();
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  bool add_special_tokens = true;  // default: true for prompt, false for messages (as vLLM)
};
TokenizeRequest parse_tokenize_request(const json& body);
// /detokenize body: "tokens" (ids < n_vocab).
std::vector<int32_t> parse_detokenize_request(const json& body, const ModelLimits& limits, std::string* model);

// ---------------------------------------------------------------------------------------------
// Response shaping.

// The text for a token in logprobs: its bytes when they are valid UTF-8, else each byte as
// "\xNN" after a "bytes:" prefix (so distinct tokens stay distinct); raw bytes separately.
struct TokenText {
  std::string text;
  std::string bytes;
};
using TokenTextFn = std::function<TokenText(int32_t)>;

json finish_reason_json(const std::optional<FinishReason>& r);
json stop_reason_json(const std::variant<std::monostate, std::string, int32_t>& r);
json usage_json(int64_t prompt_tokens, int64_t completion_tokens);

// Completions logprobs for a run of tokens: {"tokens", "token_logprobs", "top_logprobs",
// "text_offset"}; text_offset starts at offset0 and advances by each token's text length in
// code points. Appends to `into` (an object with those four arrays, or null to start one).
void append_completion_logprobs(json& into, const std::vector<SampleLogprobs>& lps, const TokenTextFn& token_text,
                                int64_t& offset);
// vLLM's prompt_logprobs: [null, {"<token id>": {"logprob", "rank", "decoded_token"}, ...}, ...],
// one entry per prompt token (prompt[0] has none; entry i + 1 from lps[i]): the prompt token and
// the k most likely at that position.
json prompt_logprobs_json(std::span<const int32_t> prompt, const std::vector<SampleLogprobs>& lps, int k,
                          const TokenTextFn& token_text);
// Completions logprobs of an echoed prompt: prompt[0] with a null logprob and null top_logprobs,
// then lps (at most k top entries each); text_offset from 0. Appends as append_completion_logprobs.
void append_prompt_completion_logprobs(json& into, std::span<const int32_t> prompt,
                                       const std::vector<SampleLogprobs>& lps, int k, const TokenTextFn& token_text);
// Chat logprobs entries ({"token", "logprob", "bytes", "top_logprobs"}) appended to the
// "content" array of `into` (null to start {"content": [], "refusal": null}, as the spec requires).
void append_chat_logprobs(json& into, const std::vector<SampleLogprobs>& lps, const TokenTextFn& token_text);

// Number of Unicode code points in valid UTF-8 s (continuation bytes not counted).
int64_t utf8_length(std::string_view s);

}  // namespace mla::server
