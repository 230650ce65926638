#pragma once
// Engine tests on the real deepseek2 forward: a factory of fresh runners (one per engine run)
// and greedy sampling that never stops at EOS, so every run makes exactly max_tokens tokens.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "engine/deepseek2_runner.h"
#include "engine/engine.h"

namespace mla::testing {

// What the engine tests vary; the rest is the runner's default. max_batch_tokens must cover the
// engine's token budget, plus one MTP row per sequence with mtp (see Deepseek2Runner).
struct TestRunnerOptions {
  int block_size = 16;
  int64_t tokens = 1024;  // KV cache size in tokens
  GgmlType dtype = GgmlType::F16;
  int64_t max_batch_tokens = 2048;
  bool mtp = false;
  bool exact_attention = true;  // ModelOptions::exact_attention (--attention-precision)
  int64_t weights_memory = 0;   // ModelOptions::weights_memory (--weights-memory): 0 every weight resident
  ExpertEviction expert_eviction = ExpertEviction::Lfu;
  int expert_io_threads = 0;  // ModelOptions::expert_io_threads (--expert-io-threads)
};

inline std::function<std::unique_ptr<ModelRunner>()> deepseek2_runner(const std::string& path, MlaPathPolicy policy,
                                                                      const TestRunnerOptions& o) {
  return [=] {
    ModelOptions mo;
    mo.n_threads = 2;
    mo.max_batch_tokens = o.max_batch_tokens;
    mo.mtp = o.mtp;
    mo.exact_attention = o.exact_attention;
    mo.weights_memory = o.weights_memory;
    mo.expert_eviction = o.expert_eviction;
    mo.expert_io_threads = o.expert_io_threads;
    KvCacheOptions kv;
    kv.dtype = o.dtype;
    kv.block_size = o.block_size;
    kv.tokens = o.tokens;
    return std::make_unique<Deepseek2Runner>(path, policy, mo, kv);
  };
}

inline SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

}  // namespace mla::testing
