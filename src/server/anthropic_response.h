#pragma once
// The Anthropic shapes of a /v1/messages job's output (a ResponseWriter): one message with
// thinking, text and tool_use blocks, or streamed as Anthropic's event sequence
// (`event: NAME` + `data: {json}`): message_start, per block content_block_start /
// content_block_delta / content_block_stop, message_delta, message_stop. Errors as
// {"type": "error", "error": {...}}.
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "server/chat_output.h"
#include "server/generation_job.h"

namespace mla::server {

// One prompt, one sequence.
class AnthropicWriter final : public ResponseWriter {
 public:
  AnthropicWriter(std::string id, std::string model, bool stream, OutputParsing parsing);
  void stream_head(int64_t prompt_tokens, Events& out) override;
  void output(size_t choice, const CompletionOutput& o, bool first, Events& out) override;
  void stream_end(std::span<const ChoiceState> choices, const JobUsage& usage, Events& out) override;
  json body(std::span<const ChoiceState> choices, const JobUsage& usage) override;
  json error_json(const ApiError& e) const override;
  void stream_error(const ApiError& e, Events& out) const override;

 private:
  json message_base() const;
  void stream_delta(ChatDelta&& d, Events& out);
  void open_block(const std::string& type, json block, Events& out);
  void close_block(Events& out);

  const std::string id_;
  const std::string model_;
  ChatOutputCollector output_;
  int block_index_ = -1;    // the open content block, -1: none
  std::string block_type_;  // its type: "text", "thinking", "tool_use"; "": none open
};

}  // namespace mla::server
