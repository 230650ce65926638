// The Anthropic shapes of a /v1/messages job's output (see anthropic_response.h).
#include "server/anthropic_response.h"

#include <fmt/format.h>

#include <utility>

#include "server/anthropic_protocol.h"
#include "server/json_limits.h"
#include "server/sse.h"

namespace mla::server {
namespace {

void event(std::string_view name, const json& data, Events& out) {
  out.push_back(fmt::format("event: {}\ndata: {}\n\n", name, dump_json(data)));
}

// stop_reason and stop_sequence: end_turn (EOS), max_tokens, stop_sequence (with the
// sequence); tool_use is decided by the caller, which knows whether a call was parsed.
std::pair<std::string, json> stop_of(const ChoiceState& c) {
  if (auto* s = std::get_if<std::string>(&c.stop_reason)) return {"stop_sequence", *s};
  return {c.finish == FinishReason::kLength ? "max_tokens" : "end_turn", nullptr};
}

}  // namespace

AnthropicWriter::AnthropicWriter(std::string id, std::string model, bool stream, OutputParsing parsing)
    : id_(std::move(id)), model_(std::move(model)), output_(std::move(parsing), stream) {}

json AnthropicWriter::message_base() const {
  return {{"id", id_},
          {"type", "message"},
          {"role", "assistant"},
          {"model", model_},
          {"content", json::array()},
          {"stop_reason", nullptr},
          {"stop_sequence", nullptr}};
}

json AnthropicWriter::error_json(const ApiError& e) const { return anthropic_error_json(e); }

void AnthropicWriter::stream_error(const ApiError& e, Events& out) const {
  event("error", anthropic_error_json(e), out);
}

void AnthropicWriter::stream_head(int64_t prompt_tokens, Events& out) {
  json start = message_base();
  start["usage"] = {{"input_tokens", prompt_tokens}, {"output_tokens", 0}};
  event("message_start", {{"type", "message_start"}, {"message", start}}, out);
}

void AnthropicWriter::open_block(const std::string& type, json block, Events& out) {
  close_block(out);
  block_type_ = type;
  ++block_index_;
  event("content_block_start", {{"type", "content_block_start"}, {"index", block_index_}, {"content_block", block}},
        out);
}

void AnthropicWriter::close_block(Events& out) {
  if (block_type_.empty()) return;
  event("content_block_stop", {{"type", "content_block_stop"}, {"index", block_index_}}, out);
  block_type_.clear();
}

void AnthropicWriter::stream_delta(ChatDelta&& d, Events& out) {
  auto delta = [&](json body) {
    event("content_block_delta", {{"type", "content_block_delta"}, {"index", block_index_}, {"delta", std::move(body)}},
          out);
  };
  if (!d.reasoning.empty()) {
    if (block_type_ != "thinking")
      open_block("thinking", {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}, out);
    delta({{"type", "thinking_delta"}, {"thinking", d.reasoning}});
  }
  if (!d.content.empty()) {
    if (block_type_ != "text") open_block("text", {{"type", "text"}, {"text", ""}}, out);
    delta({{"type", "text_delta"}, {"text", d.content}});
  }
  for (auto& c : d.tool_calls) {
    if (!c.id.empty())
      open_block("tool_use", {{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", json::object()}}, out);
    if (!c.arguments.empty()) delta({{"type", "input_json_delta"}, {"partial_json", c.arguments}});
  }
}

void AnthropicWriter::output(size_t, const CompletionOutput& o, bool, Events& out) {
  stream_delta(output_.feed(o.text), out);
}

void AnthropicWriter::stream_end(std::span<const ChoiceState> choices, const JobUsage&, Events& out) {
  auto [stop_reason, stop_sequence] = stop_of(choices.front());
  stream_delta(output_.finish(), out);
  if (output_.any_tool_call() && stop_reason == "end_turn") stop_reason = "tool_use";
  close_block(out);
  event("message_delta",
        {{"type", "message_delta"},
         {"delta", {{"stop_reason", stop_reason}, {"stop_sequence", stop_sequence}}},
         {"usage", {{"output_tokens", choices.front().n_generated}}}},
        out);
  event("message_stop", {{"type", "message_stop"}}, out);
}

json AnthropicWriter::body(std::span<const ChoiceState> choices, const JobUsage& usage) {
  auto [stop_reason, stop_sequence] = stop_of(choices.front());
  ChatMessageOut m = output_.message();
  json content = json::array();
  if (m.reasoning && !m.reasoning->empty())
    content.push_back({{"type", "thinking"}, {"thinking", *m.reasoning}, {"signature", ""}});
  if (!m.content.empty() || (m.tool_calls.empty() && content.empty()))
    content.push_back({{"type", "text"}, {"text", m.content}});
  for (const auto& c : m.tool_calls) {
    json input = json_depth_ok(c.arguments) ? json::parse(c.arguments, nullptr, false) : json::object();
    if (input.is_discarded() || !input.is_object()) input = json::object();
    content.push_back({{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", input}});
  }
  if (!m.tool_calls.empty() && stop_reason == "end_turn") stop_reason = "tool_use";
  json body = message_base();
  body["content"] = std::move(content);
  body["stop_reason"] = stop_reason;
  body["stop_sequence"] = stop_sequence;
  body["usage"] = {{"input_tokens", usage.prompt_tokens}, {"output_tokens", choices.front().n_generated}};
  return body;
}

}  // namespace mla::server
