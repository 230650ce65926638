#pragma once
// The Anthropic Messages API (POST /v1/messages, /v1/messages/count_tokens) over the same
// engine, chat template and output parsers as the OpenAI chat endpoint: a request is translated
// into chat messages (system, text, tool_use → tool_calls, tool_result → tool messages, thinking
// → reasoning_content) and tools (input_schema → parameters); the output is parsed into thinking,
// text and tool_use blocks, streamed as Anthropic's event sequence.
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "server/anthropic_protocol.h"
#include "server/chat_tools.h"
#include "server/generation_job.h"

namespace mla::server {

// One /v1/messages request in flight (one engine request, one sequence).
class AnthropicJob : public ApiJob {
 public:
  AnthropicJob(OpenAiApi& api, std::shared_ptr<HttpResponder> res, std::string id, bool stream, OutputParsing parsing,
               int prompt_tokens);
  std::string engine_id(size_t) const override { return id_; }
  const std::string& id() const override { return id_; }
  const std::shared_ptr<HttpResponder>& responder() const override { return res_; }
  void on_output(size_t prompt, RequestOutput&& out) override;
  void abort() override;
  void fail_start(size_t failed_at, const ApiError& err) override;
  void begin() override;

 private:
  void emit(std::string_view event, const json& data);
  void stream_delta(ChatDelta&& d);
  void open_block(const std::string& type, json block);
  void close_block();
  json message_base() const;
  void finish(const CompletionOutput& o);

  OpenAiApi& api_;
  std::shared_ptr<HttpResponder> res_;
  std::string id_;
  bool stream_;
  OutputParsing parsing_;
  int prompt_tokens_;

  std::mutex mu_;
  std::string text_;  // non-streaming: the whole output
  std::optional<ChatOutputStream> parser_;
  int n_generated_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  bool first_token_seen_ = false;
  int block_index_ = -1;    // the open content block, -1: none
  std::string block_type_;  // its type: "text", "thinking", "tool_use"
  bool done_ = false, begun_ = false, failed_ = false, pending_end_ = false;
  std::vector<std::string> pending_;
};

}  // namespace mla::server
