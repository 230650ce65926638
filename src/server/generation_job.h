#pragma once
// One generation request in flight, whatever protocol asked for it: one engine request per
// prompt, each with n sequences (choice index = prompt * n + sequence). The job admits the
// request (the engine's own validation, then the engine requests), delivers the engine's outputs
// (on the engine thread) to the protocol's ResponseWriter, and sends what it writes: stream
// events at once, or one response when every prompt has finished. It records the latency and
// finish metrics, and aborts its engine requests when the client goes away or the server shuts
// down. What the job needs (engine, metrics, the registry of jobs) is injected; it knows no
// protocol: the writer holds every response shape.
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "engine/engine.h"
#include "server/api_error.h"
#include "server/http_server.h"
#include "server/json.h"
#include "server/metrics.h"

namespace mla::server {

// One sequence of a job as the engine has reported it so far.
struct ChoiceState {
  int n_generated = 0;
  std::optional<FinishReason> finish;
  std::variant<std::monostate, std::string, int32_t> stop_reason;
};

// A finished job's token counts.
struct JobUsage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens the prefix cache served
};

// Stream events, each sent as one HTTP chunk, in order.
using Events = std::vector<std::string>;

// What a protocol makes of a job's outputs: its stream events, its whole response, its errors.
// The job calls it under its lock, one call at a time; a streaming writer appends events, a
// non-streaming one keeps what body() needs.
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  // Streaming: the events sent right after the response header, before any output.
  virtual void stream_head(int64_t prompt_tokens, Events& out) = 0;
  // The prompt logprobs of prompt `prompt` (SamplingParams::prompt_logprobs), before the output
  // that comes with them. Writers that do not show them ignore them.
  virtual void prompt_logprobs(size_t prompt, std::vector<SampleLogprobs> lps) {}
  // New output of one sequence; `first`: its first output.
  virtual void output(size_t choice, const CompletionOutput& o, bool first, Events& out) = 0;
  // Every prompt finished without an engine error. Streaming: the closing events.
  virtual void stream_end(std::span<const ChoiceState> choices, const JobUsage& usage, Events& out) = 0;
  // Not streaming: the response body.
  virtual json body(std::span<const ChoiceState> choices, const JobUsage& usage) = 0;
  // An error response's body in the protocol's shape.
  virtual json error_json(const ApiError& e) const = 0;
  // The events that report an engine error on a started stream (the stream then ends).
  virtual void stream_error(const ApiError& e, Events& out) const = 0;
};

class GenerationJob;

// The jobs in flight, for a shutdown: how many, and aborting them all. Thread-safe.
class JobRegistry {
 public:
  void add(const std::string& id, const std::shared_ptr<GenerationJob>& job);
  void remove(const std::string& id);
  int size() const;
  void abort_all();

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::weak_ptr<GenerationJob>> jobs_;
};

// What a job uses; each must outlive every job.
struct JobServices {
  Engine& engine;
  ServerMetrics& metrics;
  JobRegistry& jobs;
};

// A request ready for the engine.
struct JobRequest {
  std::string id;  // the response's id; the engine request ids are derived from it
  bool stream = false;
  std::vector<std::vector<int32_t>> prompts;  // >= 1
  SamplingParams params;                      // params.n sequences per prompt
};

class GenerationJob : public std::enable_shared_from_this<GenerationJob> {
 public:
  using Clock = std::chrono::steady_clock;

  // Admits the request and starts it. Throws ApiError (400, nothing started) when the engine's
  // validation refuses params; a prompt the engine refuses is answered with writer's error
  // (400) instead.
  static void start(JobServices services, std::shared_ptr<HttpResponder> res, JobRequest req,
                    std::unique_ptr<ResponseWriter> writer);

  // Use start().
  GenerationJob(JobServices services, std::shared_ptr<HttpResponder> res, std::string id, bool stream, int n,
                std::vector<int> prompt_lens, std::unique_ptr<ResponseWriter> writer);

  // Engine request id of prompt i.
  std::string engine_id(size_t prompt) const;
  // Engine thread. prompt: which engine request.
  void on_output(size_t prompt, RequestOutput&& out);
  // Any thread: abort every engine request still running (client gone, or shutdown).
  void abort();

 private:
  struct Choice {
    ChoiceState state;
    bool started = false;  // an output was delivered
    Clock::time_point last_token{};
  };
  struct Prompt {
    bool first_token_seen = false;
    bool finished = false;
    int cached_tokens = 0;
  };

  void add_requests(std::vector<std::vector<int32_t>> prompts, const SamplingParams& params);
  // The engine refused prompt `failed_at` (the ones before it were added): abort those and
  // answer with err (instead of begin()).
  void fail_start(size_t failed_at, const ApiError& err);
  // Every engine request is added: start the response (streaming: the header, then the events
  // that arrived meanwhile).
  void begin();
  void finish_all();
  int64_t prompt_tokens() const;
  void observe(size_t prompt, const RequestOutput& out, Clock::time_point now);
  // Streaming: the writer's head events, once, before any output event.
  void write_head(Events& out);
  // Stream events, held until begin().
  void emit(Events& events);
  void emit_end();

  JobServices services_;
  std::shared_ptr<HttpResponder> res_;
  const std::string id_;
  const bool stream_;
  const int n_;  // sequences per prompt
  const std::vector<int> prompt_lens_;
  const std::unique_ptr<ResponseWriter> writer_;
  const Clock::time_point start_ = Clock::now();

  std::mutex mu_;
  std::vector<Choice> choices_;
  std::vector<Prompt> prompts_;
  size_t n_finished_ = 0;
  bool failed_ = false;  // an error was sent: ignore everything else
  std::string error_;    // the first engine error
  int error_status_ = 500;
  bool done_ = false;
  bool begun_ = false;
  bool head_written_ = false;
  std::vector<std::string> pending_;
  bool pending_end_ = false;
};

}  // namespace mla::server
