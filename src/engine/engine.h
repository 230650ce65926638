#pragma once
// The serving engine's public API: what the HTTP server (and `mla run`) uses. The types it
// takes and gives (SamplingParams, RequestOutput, EngineConfig, ...) are in engine/types.h.
//
//   Engine engine(runner, config, decoder);  engine.start();        // loop on its own thread
//   auto stream = engine.add_request("cmpl-1", prompt_ids, params); // any thread
//   RequestOutput out; while (stream->next(out)) { ... out.outputs[i].text ... }
//   engine.abort("cmpl-1");                                          // any thread
//
// Every RequestOutput is a delta: the tokens, text and logprobs produced since the previous
// output of that request. A request's last output has finished == true. add_request, abort,
// counters and has_unfinished are thread-safe; outputs are produced on the engine thread (or on the
// caller's thread when it drives the engine with step()/run_until_idle() instead of start()).
#include <memory>
#include <string>
#include <vector>

#include "engine/types.h"

namespace mla {

class ModelRunner;  // engine/model_runner.h: runs one BatchMeta through the model
class TextDecoder;  // engine/text_decoder.h: token ids → text, incrementally
namespace kv {
class KvManager;  // kv/kv_manager.h: block tables over the block pool
}

class Engine {
 public:
  // The runner owns the model and the KV cache; the decoder (may be null: no text) turns tokens
  // into text. Throws mla::Error for an invalid config.
  Engine(std::unique_ptr<ModelRunner> runner, EngineConfig config,
         std::shared_ptr<const TextDecoder> decoder = nullptr);
  ~Engine();  // stops the loop thread
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates and queues a request; it is scheduled from the next step on. Throws mla::Error
  // (nothing queued) for an empty prompt, a token id out of range, a prompt that does not fit
  // max_model_len / the KV cache, invalid params, or an id already in use.
  std::shared_ptr<RequestStream> add_request(std::string id, std::vector<int32_t> prompt, SamplingParams params);
  void add_request(std::string id, std::vector<int32_t> prompt, SamplingParams params, OutputCallback on_output);
  // Finishes the request (finish_reason abort) and frees its blocks by the next step. False when
  // no such request is active.
  bool abort(const std::string& id);

  EngineCounters counters() const;
  const EngineConfig& config() const;  // with max_model_len resolved
  int n_vocab() const;
  bool has_unfinished() const;

  // Runs the loop on a background thread until stop() or destruction.
  void start();
  void stop();
  // Or drive it from the calling thread (not together with start()): one scheduler step and
  // forward call; false when there was nothing to do.
  bool step();
  void run_until_idle();

  // Benchmarks (mla bench): drafts per step from now on, 0..config().num_speculative_tokens, while
  // no request is active; 0 decodes without the MTP layer at all. Only with prefix caching off
  // (blocks computed without MTP rows must not serve a speculating sequence). Throws mla::Error.
  void set_speculative_tokens(int k);

  // For tests and tools, while the engine is idle or from its own thread.
  ModelRunner& runner();
  const kv::KvManager& kv() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mla
