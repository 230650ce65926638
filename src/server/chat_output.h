#pragma once
// A chat completion's output text turned into what the APIs return: reasoning, content and tool
// calls, both for a whole output (non-streaming) and delta by delta (streaming). The reasoning
// split runs first; the tool-call parser sees only the text after it.
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/reasoning.h"
#include "server/tool_parsers/tool_parser.h"

namespace mla::server {

// What one request parses, decided when the request is read.
// NOLINTNEXTLINE(bugprone-exception-escape): the implicit moves of json and std::optional do not throw
struct OutputParsing {
  const ToolCallFormat* tool_format = nullptr;  // nullptr: tool calls are not parsed
  json tools;                                   // the request's tools, for argument types
  std::optional<bool> reasoning_open;           // nullopt: no reasoning split (see reasoning.h)
  bool reasoning_breaks = false;                // a tool-call marker ends the reasoning (reasoning.h)
  bool reasoning_trim = false;                  // the reasoning loses its trailing whitespace
  std::vector<std::string_view> reasoning_break_markers() const {
    return reasoning_breaks && tool_format ? tool_format->start_markers() : std::vector<std::string_view>{};
  }
  bool active() const { return tool_format || reasoning_open.has_value(); }
};

struct ChatMessageOut {
  std::optional<std::string> reasoning;
  std::string content;
  std::vector<FinalToolCall> tool_calls;
};

// The whole output at once. Content around tool calls that is only whitespace becomes "".
ChatMessageOut parse_chat_output(const OutputParsing& p, std::string_view text);

struct ChatDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

class ChatOutputStream {
 public:
  explicit ChatOutputStream(const OutputParsing& p);
  ChatDelta feed(std::string_view text);
  ChatDelta finish();
  bool any_tool_call() const { return tools_ && tools_->any_call(); }

 private:
  void tool_step(ChatDelta& d, const std::string& content, bool final);
  std::optional<ReasoningStream> reasoning_;
  std::optional<ToolCallStream> tools_;
  bool content_started_ = false;  // leading whitespace before the first call is not content
  std::string lead_ws_;
};

// One sequence's output as a protocol's writer sees it: streaming, parsed delta by delta;
// otherwise kept whole and parsed once at the end. Not to be moved once fed (the parser refers
// to the parsing it holds).
class ChatOutputCollector {
 public:
  ChatOutputCollector(OutputParsing p, bool stream) : parsing_(std::move(p)), stream_(stream) {}
  // Streaming: what `text` adds; otherwise `text` is kept and the delta is empty.
  ChatDelta feed(std::string_view text);
  // Streaming: the rest, once the output has ended.
  ChatDelta finish();
  // Streaming: whether a tool call was parsed.
  bool any_tool_call() const { return parser_ && parser_->any_tool_call(); }
  // Not streaming: the whole output.
  ChatMessageOut message() const { return parse_chat_output(parsing_, text_); }

 private:
  ChatOutputStream& parser();
  const OutputParsing parsing_;
  const bool stream_;
  std::string text_;  // not streaming: the whole output
  std::optional<ChatOutputStream> parser_;
};

// OpenAI shapes: message.tool_calls entries and delta.tool_calls entries.
json tool_calls_json(const std::vector<FinalToolCall>& calls);
json tool_call_deltas_json(const std::vector<ToolCallDelta>& deltas);

}  // namespace mla::server
