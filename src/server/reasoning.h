#pragma once
// Reasoning ("thinking") text in model output: <think>...</think> split from the answer, as
// vLLM's --reasoning-parser does, incrementally for streaming.
//
// Parsers (vLLM's names): deepseek_r1 (always thinks), deepseek_v3 (thinks when
// chat_template_kwargs thinking / enable_thinking is true), glm45 / glm47 / kimi_k2 / qwen3
// (think unless enable_thinking / thinking is false), deepseek_v4 (thinks unless thinking /
// enable_thinking is false or reasoning_effort is "none"; when it does not, a leading <think>
// still opens reasoning). A thinking request's output starts inside
// the reasoning (the template opened <think>, or the model writes <think> first, which is
// skipped) unless the prompt ends in </think>; with no </think> at all, everything is reasoning.
// A request that does not think is not split (deepseek_v4 aside): any tags stay in the content.
// (All as vLLM.)
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mla::server {

std::vector<std::string> reasoning_parser_names();
bool is_reasoning_parser(std::string_view name);
// The parser for a chat template's source, "" when it writes no reasoning tags.
std::string detect_reasoning_parser(std::string_view template_source);

// How one request's output starts; nullopt: no reasoning is split out for this request.
// prompt: the rendered prompt (its end says whether the template opened <think>).
// Whether a tool-call marker inside the reasoning ends it (vLLM's glm45/glm47, kimi_k2, qwen3,
// deepseek_v4).
bool reasoning_breaks_at_tool_calls(std::string_view parser);

// Whether the reasoning loses its trailing whitespace (vLLM's parser-engine parsers: glm45/glm47,
// kimi_k2, deepseek_v4).
bool reasoning_trims_end(std::string_view parser);

std::optional<bool> reasoning_starts_open(std::string_view parser, const nlohmann::ordered_json& chat_template_kwargs,
                                          std::string_view prompt);

class ReasoningStream {
 public:
  // breaks: markers that end the reasoning without </think> and stay in the content (the
  // tool-call markers, for the parsers that allow a call straight out of the reasoning).
  // trim_end: the reasoning's trailing whitespace is dropped (reasoning_trims_end).
  explicit ReasoningStream(bool starts_open, std::vector<std::string_view> breaks = {}, bool trim_end = false);
  // Appends output text; the new reasoning and content are appended to the two strings.
  void feed(std::string_view text, std::string* reasoning, std::string* content);
  // The output is complete: flushes the held-back tail.
  void finish(std::string* reasoning, std::string* content);
  // Whether any reasoning was seen (a <think> or the open start).
  bool has_reasoning() const { return saw_reasoning_; }

  // The whole output at once.
  struct Split {
    std::optional<std::string> reasoning;  // nullopt: none
    std::string content;
  };
  static Split split(std::string_view text, bool starts_open, std::vector<std::string_view> breaks = {},
                     bool trim_end = false);

 private:
  enum class State { kStart, kReasoning, kContent };
  void run(bool final, std::string* reasoning, std::string* content);
  State state_;
  bool saw_reasoning_ = false;
  bool started_text_ = false;  // the reasoning has begun (a leading <think> no longer skipped)
  std::string pending_;        // text not yet classified
  std::vector<std::string_view> breaks_;
  bool trim_end_ = false;
};

}  // namespace mla::server
