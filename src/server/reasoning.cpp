// Reasoning split (see reasoning.h).
#include "server/reasoning.h"

#include "server/tool_parsers/tool_parser.h"

namespace mla::server {
namespace {

constexpr std::string_view kThinkStart = "<think>";
// The length of s without its trailing whitespace.
size_t trimmed_end(std::string_view s) {
  const size_t last = s.find_last_not_of(" \t\n\r\f\v");
  return last == std::string_view::npos ? 0 : last + 1;
}
constexpr std::string_view kThinkEnd = "</think>";

bool kwarg_false(const nlohmann::ordered_json& kw, const char* name) {
  auto it = kw.find(name);
  return it != kw.end() && it->is_boolean() && !it->get<bool>();
}
bool kwarg_true(const nlohmann::ordered_json& kw, const char* name) {
  auto it = kw.find(name);
  return it != kw.end() && it->is_boolean() && it->get<bool>();
}
// Python's bool() of a kwarg's value (absent: false).
bool kwarg_truthy(const nlohmann::ordered_json& kw, const char* name) {
  auto it = kw.find(name);
  if (it == kw.end() || it->is_null()) return false;
  if (it->is_boolean()) return it->get<bool>();
  if (it->is_number()) return it->get<double>() != 0;
  if (it->is_string() || it->is_array() || it->is_object()) return !it->empty();
  return true;
}

// DeepSeek-V4 (as vLLM's deepseek_v4 parser and tokenizer): thinks unless thinking /
// enable_thinking is given and neither is truthy, or reasoning_effort is "none".
bool deepseek_v4_thinks(const nlohmann::ordered_json& kw) {
  const bool given = kw.contains("thinking") || kw.contains("enable_thinking");
  const bool on = !given || kwarg_truthy(kw, "thinking") || kwarg_truthy(kw, "enable_thinking");
  auto effort = kw.find("reasoning_effort");
  return on && !(effort != kw.end() && effort->is_string() && effort->get<std::string>() == "none");
}

}  // namespace

std::vector<std::string> reasoning_parser_names() {
  return {"deepseek_r1", "deepseek_v3", "deepseek_v4", "glm45", "glm47", "kimi_k2", "qwen3"};
}

bool is_reasoning_parser(std::string_view name) {
  for (const auto& n : reasoning_parser_names())
    if (n == name) return true;
  return false;
}

std::string detect_reasoning_parser(std::string_view src) {
  auto has = [&](std::string_view s) { return src.find(s) != std::string_view::npos; };
  if (!has(kThinkStart) && !has(kThinkEnd)) return "";
  if (has("<arg_key>")) return "glm45";
  if (has("\xef\xbd\x9c"
          "DSML"
          "\xef\xbd\x9c") &&
      !has("function_calls"))
    return "deepseek_v4";  // ｜DSML｜ calls in tool_calls: V4's templates
  if (has("<\xef\xbd\x9c"
          "Assistant\xef\xbd\x9c>"))  // <｜Assistant｜>
    return has("thinking") ? "deepseek_v3" : "deepseek_r1";
  if (has("<|im_assistant|>")) return "kimi_k2";
  if (has("<|im_start|>")) return "qwen3";
  return "deepseek_r1";
}

std::optional<bool> reasoning_starts_open(std::string_view parser, const nlohmann::ordered_json& kw,
                                          std::string_view prompt) {
  // DeepSeek-V4 reads <think> in its output even when the request does not think (vLLM's
  // deepseek_v4 starts in the content then): the split starts closed instead of not at all.
  if (parser == "deepseek_v4" && !deepseek_v4_thinks(kw)) return false;
  const bool off = kwarg_false(kw, "enable_thinking") || kwarg_false(kw, "thinking");
  bool on = true;  // whether this request thinks at all
  if (parser == "deepseek_v3")
    on = kwarg_true(kw, "thinking") || kwarg_true(kw, "enable_thinking");
  else if (parser == "deepseek_r1" || parser == "deepseek_v4")  // (V4 without thinking returned above)
    on = true;
  else
    on = !off;
  if (!on) return std::nullopt;
  // A thinking request starts inside the reasoning (the template opened <think>, or the model
  // writes one first, which is skipped), unless the prompt already closed it.
  return !tool_format::trim(prompt).ends_with(kThinkEnd);
}

bool reasoning_trims_end(std::string_view parser) {
  return parser == "glm45" || parser == "glm47" || parser == "kimi_k2" || parser == "deepseek_v4";
}

bool reasoning_breaks_at_tool_calls(std::string_view parser) {
  return parser == "glm45" || parser == "glm47" || parser == "kimi_k2" || parser == "qwen3" || parser == "deepseek_v4";
}

ReasoningStream::ReasoningStream(bool starts_open, std::vector<std::string_view> breaks, bool trim_end)
    : state_(starts_open ? State::kReasoning : State::kStart),
      saw_reasoning_(starts_open),
      breaks_(std::move(breaks)),
      trim_end_(trim_end) {}

void ReasoningStream::feed(std::string_view text, std::string* reasoning, std::string* content) {
  pending_ += text;
  run(false, reasoning, content);
}

void ReasoningStream::finish(std::string* reasoning, std::string* content) { run(true, reasoning, content); }

void ReasoningStream::run(bool final, std::string* reasoning, std::string* content) {
  for (;;) {
    std::string_view p = pending_;
    if (state_ == State::kContent) {
      content->append(p);
      pending_.clear();
      return;
    }
    // At the start of a reasoning span or of the output, whitespace then <think> opens it
    // (a repeated <think> right after the template's own is dropped too).
    const bool at_start = state_ == State::kStart || !started_text_;
    if (at_start) {
      const size_t nonws = p.find_first_not_of(" \t\r\n");
      if (nonws == std::string_view::npos && !final) return;  // only whitespace so far
      std::string_view rest = nonws == std::string_view::npos ? std::string_view{} : p.substr(nonws);
      if (rest.starts_with(kThinkStart)) {
        state_ = State::kReasoning;
        saw_reasoning_ = true;
        started_text_ = true;
        pending_.erase(0, nonws + kThinkStart.size());
        continue;
      }
      if (!final && kThinkStart.starts_with(rest)) return;  // may still become <think>
      started_text_ = true;
      if (state_ == State::kStart) {
        state_ = State::kContent;
        continue;
      }
    }
    // In reasoning: up to </think>, or up to a break marker (which stays for the content).
    size_t end = p.find(kThinkEnd), skip = kThinkEnd.size();
    for (auto b : breaks_) {
      const size_t at = p.find(b);
      if (at < end) end = at, skip = 0;
    }
    if (end != std::string_view::npos) {
      reasoning->append(p.substr(0, trim_end_ ? trimmed_end(p.substr(0, end)) : end));
      pending_.erase(0, end + skip);
      state_ = State::kContent;
      continue;
    }
    std::vector<std::string_view> markers = breaks_;
    markers.push_back(kThinkEnd);
    const size_t hold = final ? 0 : tool_format::partial_marker_suffix(p, markers);
    // Trailing whitespace waits (trim_end: it is dropped if the reasoning ends after it).
    const size_t emit = trim_end_ ? trimmed_end(p.substr(0, p.size() - hold)) : p.size() - hold;
    reasoning->append(p.substr(0, emit));
    pending_.erase(0, final ? p.size() : emit);
    return;
  }
}

ReasoningStream::Split ReasoningStream::split(std::string_view text, bool starts_open,
                                              std::vector<std::string_view> breaks, bool trim_end) {
  ReasoningStream s(starts_open, std::move(breaks), trim_end);
  std::string reasoning, content;
  s.feed(text, &reasoning, &content);
  s.finish(&reasoning, &content);
  Split out;
  if (s.has_reasoning()) out.reasoning = std::move(reasoning);
  out.content = std::move(content);
  return out;
}

}  // namespace mla::server
