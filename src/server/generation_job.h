#pragma once
// One /v1/completions or /v1/chat/completions request in flight: one engine request per prompt,
// each with n sequences (choice index = prompt * n + sequence). Engine outputs arrive on the
// engine thread (on_output) and are turned into SSE chunks at once, or gathered into one JSON
// response sent when every prompt has finished. A client that goes away aborts the engine
// requests (abort()).
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "server/chat_output.h"
#include "server/http_server.h"
#include "server/openai_protocol.h"

namespace mla::server {

class OpenAiApi;

// A request in flight as OpenAiApi drives it: engine requests added, their outputs delivered on
// the engine thread, aborted on disconnect. GenerationJob (OpenAI shapes) and AnthropicJob
// (anthropic_api.h) implement it.
class ApiJob {
 public:
  virtual ~ApiJob() = default;
  virtual std::string engine_id(size_t prompt) const = 0;
  virtual const std::string& id() const = 0;
  virtual const std::shared_ptr<HttpResponder>& responder() const = 0;
  virtual void on_output(size_t prompt, RequestOutput&& out) = 0;
  virtual void abort() = 0;
  virtual void fail_start(size_t failed_at, const ApiError& err) = 0;
  virtual void begin() = 0;
};

class GenerationJob : public ApiJob {
 public:
  enum class Kind { kCompletion, kChat };
  using Clock = std::chrono::steady_clock;

  // NOLINTNEXTLINE(bugprone-exception-escape): the implicit moves of its strings and json do not throw
  struct Options {
    Kind kind = Kind::kCompletion;
    std::string id;       // "cmpl-..." / "chatcmpl-..."
    int64_t created = 0;  // unix seconds
    int n = 1;            // sequences per prompt
    bool stream = false;
    bool include_usage = false;
    bool logprobs = false;
    bool echo = false;      // completions: the prompt text starts each choice
    OutputParsing parsing;  // chat: reasoning / tool calls split out of the text
    // tool_choice named a function: the call is the answer, finish_reason stays "stop" (as
    // OpenAI and vLLM); otherwise a parsed call makes a stopped choice "tool_calls".
    bool named_tool_choice = false;
  };

  GenerationJob(OpenAiApi& api, std::shared_ptr<HttpResponder> res, Options opt, std::vector<std::string> prompt_texts,
                std::vector<int> prompt_lens);

  // Engine request id of prompt i.
  std::string engine_id(size_t prompt) const override;
  const std::string& id() const override { return opt_.id; }
  size_t n_prompts() const { return prompt_lens_.size(); }
  const std::shared_ptr<HttpResponder>& responder() const override { return res_; }

  // Engine thread. prompt: which engine request.
  void on_output(size_t prompt, RequestOutput&& out) override;
  // Any thread: abort every engine request still running (client gone, or shutdown).
  void abort() override;
  // The engine refused prompt `failed_at` (the ones before it were added): abort those and
  // answer with err (instead of begin()).
  void fail_start(size_t failed_at, const ApiError& err) override;
  // Every engine request is added: start the response (streaming: the header, then the chunks
  // that arrived meanwhile).
  void begin() override;

 private:
  struct Choice {
    std::string text;
    json logprobs;  // null until the first logprobs
    int64_t text_offset = 0;
    int n_generated = 0;
    std::optional<FinishReason> finish;
    std::variant<std::monostate, std::string, int32_t> stop_reason;
    bool started = false;                    // stream: role / echo chunk sent
    std::optional<ChatOutputStream> parser;  // stream with parsing: the incremental parser
    Clock::time_point last_token{};
  };
  struct Prompt {
    bool first_token_seen = false;
    bool finished = false;
  };

  json chunk_base() const;
  void stream_choice(size_t ci, const CompletionOutput& o, const std::string& prefix);
  void finish_all();
  void send_error(int status, const std::string& message);
  // Stream bytes, held until begin().
  void emit(std::string bytes);
  void emit_end();
  void observe(size_t prompt, const RequestOutput& out, Clock::time_point now);

  OpenAiApi& api_;
  std::shared_ptr<HttpResponder> res_;
  Options opt_;
  std::vector<std::string> prompt_texts_;
  std::vector<int> prompt_lens_;
  Clock::time_point start_ = Clock::now();

  std::mutex mu_;
  std::vector<Choice> choices_;
  std::vector<Prompt> prompts_;
  size_t n_finished_ = 0;
  bool failed_ = false;  // an error was sent: ignore everything else
  std::string error_;    // the first engine error
  int error_status_ = 500;
  bool done_ = false;
  bool begun_ = false;
  std::vector<std::string> pending_;
  bool pending_end_ = false;
};

}  // namespace mla::server
