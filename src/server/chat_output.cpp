// Reasoning + tool-call parsing of a chat output (see chat_output.h).
#include "server/chat_output.h"

namespace mla::server {

ChatMessageOut parse_chat_output(const OutputParsing& p, std::string_view text) {
  ChatMessageOut m;
  std::string content(text);
  if (p.reasoning_open) {
    ReasoningStream::Split s =
        ReasoningStream::split(text, *p.reasoning_open, p.reasoning_break_markers(), p.reasoning_trim);
    m.reasoning = std::move(s.reasoning);
    content = std::move(s.content);
  }
  if (!p.tool_format) {
    m.content = std::move(content);
    return m;
  }
  ParsedText parsed = ToolCallStream::parse_all(*p.tool_format, content, p.tools);
  for (auto& c : parsed.calls) m.tool_calls.push_back({c.id.empty() ? make_tool_call_id() : c.id, c.name, c.arguments});
  m.content = std::move(parsed.content);
  if (!m.tool_calls.empty() && tool_format::trim(m.content).empty()) m.content.clear();
  return m;
}

ChatOutputStream::ChatOutputStream(const OutputParsing& p) {
  if (p.reasoning_open) reasoning_.emplace(*p.reasoning_open, p.reasoning_break_markers(), p.reasoning_trim);
  if (p.tool_format) tools_.emplace(*p.tool_format, p.tools);
}

void ChatOutputStream::tool_step(ChatDelta& d, const std::string& content, bool final) {
  std::string out;
  if (tools_) {
    if (final) {
      tools_->feed(content, &out, &d.tool_calls);
      tools_->finish(&out, &d.tool_calls);
    } else {
      tools_->feed(content, &out, &d.tool_calls);
    }
  } else {
    out = content;
  }
  // Whitespace before anything else is held until it is known whether a call follows (then it
  // is dropped, as in the non-streamed message) or text (then it is sent with it).
  if (!content_started_) {
    const size_t nonws = out.find_first_not_of(" \t\r\n");
    if (nonws == std::string::npos) {
      lead_ws_ += out;
      if (final && !any_tool_call()) d.content += lead_ws_;
      return;
    }
    if (!d.tool_calls.empty() || any_tool_call()) lead_ws_.clear();
    content_started_ = true;
    out = lead_ws_ + out;
    lead_ws_.clear();
  }
  d.content += out;
}

ChatDelta ChatOutputStream::feed(std::string_view text) {
  ChatDelta d;
  std::string content;
  if (reasoning_)
    reasoning_->feed(text, &d.reasoning, &content);
  else
    content = std::string(text);
  tool_step(d, content, false);
  return d;
}

ChatDelta ChatOutputStream::finish() {
  ChatDelta d;
  std::string content;
  if (reasoning_) reasoning_->finish(&d.reasoning, &content);
  tool_step(d, content, true);
  return d;
}

json tool_calls_json(const std::vector<FinalToolCall>& calls) {
  json a = json::array();
  for (const auto& c : calls)
    a.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  return a;
}

json tool_call_deltas_json(const std::vector<ToolCallDelta>& deltas) {
  json a = json::array();
  for (const auto& d : deltas) {
    json e = {{"index", d.index}};
    json fn = json::object();
    if (!d.id.empty()) {
      e["id"] = d.id;
      e["type"] = "function";
      fn["name"] = d.name;
    }
    fn["arguments"] = d.arguments;
    e["function"] = std::move(fn);
    a.push_back(std::move(e));
  }
  return a;
}

ChatOutputStream& ChatOutputCollector::parser() {
  if (!parser_) parser_.emplace(parsing_);
  return *parser_;
}

ChatDelta ChatOutputCollector::feed(std::string_view text) {
  if (stream_) return parser().feed(text);
  text_ += text;
  return {};
}

ChatDelta ChatOutputCollector::finish() { return parser().finish(); }

}  // namespace mla::server
