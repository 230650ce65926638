// The engine with routed experts streamed through the expert cache (--weights-memory): a batch of
// sequences arriving at different steps, chunked prefill and decode, under a budget that holds one
// MoE call's experts and no more, gives the resident run's tokens and logits bit for bit (MHA,
// MQA, auto with the F32 kernels; LFU and LRU), and the engine's counters report the cache. The
// same with read-ahead on: I/O threads reading the experts predicted for the next layer while the
// engine's steps compute, some predictions wrong.
#include <gtest/gtest.h>

#include <cstring>

#include "../model/model_test_util.h"
#include "../support/model_engine.h"
#include "engine_harness.h"

namespace mla::testing {
namespace {

constexpr int kBudgetTokens = 8;  // engine token budget = the model's max_batch_tokens

std::string moe_model() {
  SynthSpec s = small_spec();
  s.type = GgmlType::Q8_0;
  s.n_layer = 4;  // 3 MoE layers
  s.n_expert = 16;
  s.n_expert_used = 3;
  s.n_vocab = 128;
  s.seed = 43;
  return synth_file("ec_engine_q8", s);
}

// Resident bytes + the kBudgetTokens experts one MoE call can select: a third of one layer's.
int64_t tight_budget(const std::string& path) {
  WeightLoadOptions wo;
  wo.expert_cache = {.budget_bytes = int64_t{1} << 30, .max_batch_tokens = kBudgetTokens};
  auto b = load_deepseek2(path, wo);
  return b->weights.expert_cache->resident_bytes() + kBudgetTokens * b->weights.expert_cache->slot_bytes();
}

std::vector<Arrival> arrivals() {
  const int lens[] = {1, 6, 13, 4, 21, 9};
  const int at[] = {0, 0, 1, 2, 4, 7};
  std::vector<Arrival> a;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> p;
    for (int k = 0; k < lens[i]; ++k) p.push_back((i * 31 + k * 17 + k * k) % 128);
    a.push_back({"s" + std::to_string(i), p, greedy(5 + i % 3), at[i]});
  }
  return a;
}

void run_case(MlaPathPolicy policy, bool exact, ExpertEviction ev, int io_threads = 0) {
  const std::string path = moe_model();
  TestRunnerOptions o{.block_size = 16, .tokens = 256, .max_batch_tokens = kBudgetTokens, .exact_attention = exact};
  EngineConfig cfg = config(policy, kBudgetTokens, false);
  cfg.max_num_seqs = 4;  // decode steps of up to 4 sequences beside prefill chunks
  const RunResult resident = run_engine(deepseek2_runner(path, policy, o), cfg, arrivals());
  o.weights_memory = tight_budget(path);
  o.expert_eviction = ev;
  o.expert_io_threads = io_threads;
  const RunResult cached = run_engine(deepseek2_runner(path, policy, o), cfg, arrivals());
  for (const auto& [id, seqs] : resident.seqs) {
    ASSERT_TRUE(cached.seqs.count(id)) << id;
    EXPECT_EQ(cached.seqs.at(id)[0].tokens, seqs[0].tokens) << "tokens of " << id;
    for (const auto& [pos, row] : resident.logits.at(id)) {
      const auto& got = cached.logits.at(id).at(pos);
      ASSERT_EQ(0, std::memcmp(row.data(), got.data(), row.size() * sizeof(float))) << id << " position " << pos;
    }
  }
  EXPECT_EQ(resident.counters.expert_cache_slots, 0);
  EXPECT_EQ(resident.counters.n_expert_cache_misses, 0);
  EXPECT_EQ(cached.counters.expert_cache_slots, kBudgetTokens);
  // 48 (layer, expert) keys through 8 slots: most lookups miss after the first layer's.
  const EngineCounters& c = cached.counters;
  EXPECT_GT(c.n_expert_cache_misses + c.n_expert_cache_read_ahead, 48);
  EXPECT_GT(c.n_expert_cache_hits, 0);
  EXPECT_GT(c.expert_cache_bytes_read, 0);
  EXPECT_GT(c.expert_cache_stall_seconds, 0.0);
  if (io_threads == 0) {
    EXPECT_EQ(c.n_expert_cache_predictions, 0);
    EXPECT_EQ(c.expert_cache_read_ahead_bytes, 0);
    return;
  }
  EXPECT_GT(c.n_expert_cache_read_ahead, 0);
  EXPECT_GT(c.expert_cache_read_ahead_bytes, 0);
  EXPECT_GT(c.n_expert_cache_predictions_used, 0);
  EXPECT_LT(c.n_expert_cache_predictions_used, c.n_expert_cache_predictions);
  EXPECT_LE(c.n_expert_cache_predictions_used, c.n_expert_cache_predictable_uses);
}

TEST(ExpertCacheEngine, BatchBitIdenticalMha) { run_case(MlaPathPolicy::Mha, true, ExpertEviction::Lfu); }
TEST(ExpertCacheEngine, BatchBitIdenticalMqaLru) { run_case(MlaPathPolicy::Mqa, true, ExpertEviction::Lru); }
TEST(ExpertCacheEngine, BatchBitIdenticalAutoF32) { run_case(MlaPathPolicy::Auto, false, ExpertEviction::Lfu); }
TEST(ExpertCacheEngine, ReadAheadBatchBitIdenticalMha) { run_case(MlaPathPolicy::Mha, true, ExpertEviction::Lfu, 2); }
TEST(ExpertCacheEngine, ReadAheadBatchBitIdenticalAutoF32Lru) {
  run_case(MlaPathPolicy::Auto, false, ExpertEviction::Lru, 2);
}

}  // namespace
}  // namespace mla::testing
