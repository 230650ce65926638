#pragma once
// Drives an Engine step by step with requests arriving at given steps, and records every
// request's tokens, logits rows (per position) and finish. After each run it asserts that every
// KV block went back to the pool.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/model_runner.h"
#include "kv/kv_manager.h"

namespace mla::testing {

struct Arrival {
  std::string id;
  std::vector<int32_t> prompt;
  SamplingParams params;
  int at_step = 0;
};

struct SeqResult {
  std::vector<int32_t> tokens;
  std::string text;
  std::optional<FinishReason> finish;
  std::variant<std::monostate, std::string, int32_t> stop_reason;
  std::vector<SampleLogprobs> logprobs;
};

struct RunResult {
  std::map<std::string, std::vector<SeqResult>> seqs;               // by request, index
  std::map<std::string, std::map<int, std::vector<float>>> logits;  // index 0, position
  std::map<std::string, int> n_cached;
  std::map<std::string, std::vector<SampleLogprobs>> prompt_logprobs;  // requests that asked for them

  EngineCounters counters;
  int n_steps = 0;
};

// make_runner: a fresh runner per run. on_step(k, engine): called before step k (for aborts).
inline RunResult run_engine(std::function<std::unique_ptr<ModelRunner>()> make_runner, EngineConfig cfg,
                            const std::vector<Arrival>& arrivals, std::shared_ptr<const TextDecoder> decoder = nullptr,
                            std::function<void(int, Engine&)> on_step = nullptr,
                            std::function<void(Engine&)> after_each_step = nullptr) {
  RunResult res;
  auto* logits = &res.logits;
  cfg.on_logits = [logits](const std::string& id, int index, int position, std::span<const float> row) {
    if (index == 0) (*logits)[id][position].assign(row.begin(), row.end());
  };
  Engine engine(make_runner(), cfg, decoder);
  size_t added = 0;
  int step = 0;
  while (added < arrivals.size() || engine.has_unfinished()) {
    for (const auto& a : arrivals) {
      if (a.at_step != step) continue;
      ++added;
      engine.add_request(a.id, a.prompt, a.params, [&res](RequestOutput&& out) {
        auto& seqs = res.seqs[out.request_id];
        res.n_cached[out.request_id] = out.n_cached_tokens;
        if (!out.prompt_logprobs.empty()) {
          EXPECT_FALSE(res.prompt_logprobs.count(out.request_id)) << "prompt logprobs twice for " << out.request_id;
          res.prompt_logprobs[out.request_id] = out.prompt_logprobs;
        }
        for (auto& o : out.outputs) {
          if (seqs.size() <= static_cast<size_t>(o.index)) seqs.resize(o.index + 1);
          auto& s = seqs[o.index];
          s.tokens.insert(s.tokens.end(), o.token_ids.begin(), o.token_ids.end());
          s.text += o.text;
          for (auto& lp : o.logprobs) s.logprobs.push_back(lp);
          if (o.finish_reason) {
            EXPECT_FALSE(s.finish) << "two finishes for " << out.request_id;
            s.finish = o.finish_reason;
            s.stop_reason = o.stop_reason;
          }
        }
      });
    }
    if (on_step) on_step(step, engine);
    engine.step();
    if (after_each_step) after_each_step(engine);
    ++step;
    if (step > 100000) {
      ADD_FAILURE() << "engine did not finish";
      break;
    }
  }
  res.counters = engine.counters();
  res.n_steps = step;
  const auto& pool = engine.kv().pool();
  EXPECT_EQ(pool.n_free(), pool.n_blocks()) << "KV blocks leaked";
  EXPECT_NO_THROW(pool.check_invariants());
  return res;
}

// The engine configuration the batch-invariance tests vary: path policy, token budget, prefix
// caching; up to 16 sequences.
inline EngineConfig config(MlaPathPolicy policy, int budget, bool prefix) {
  EngineConfig c;
  c.path_policy = policy;
  c.max_num_batched_tokens = budget;
  c.enable_prefix_caching = prefix;
  c.max_num_seqs = 16;
  return c;
}

}  // namespace mla::testing
