// The engine on the DeepSeek-V4 forward (Deepseek4Runner) with the transformers fixture model
// (tests/fixtures/deepseek4/mixed): concurrent requests of different prompt lengths under small
// token budgets (chunked prefill), a block pool small enough to preempt, n > 1 forks. Every
// sequence's logits must be bit for bit those of the same sequence run alone through
// Deepseek4Model (whole prompt, then one token at a time), the prompt logits must still match
// transformers', and no state may outlive its sequence or exceed the runner's memory bound.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../support/model_engine.h"
#include "engine/deepseek4_runner.h"
#include "engine_harness.h"

namespace mla::testing {
namespace {

const std::string kDir = std::string(MLA_SOURCE_DIR) + "/tests/fixtures/deepseek4/mixed/";

std::vector<int32_t> fixture_tokens() {
  std::ifstream in(kDir + "reference.json");
  return nlohmann::json::parse(in)["token_ids"].get<std::vector<int32_t>>();
}

std::function<std::unique_ptr<ModelRunner>()> ds4_runner(int block_size, int64_t tokens, int max_num_seqs) {
  return [=] {
    Deepseek4RunnerOptions o;
    o.n_threads = 2;
    o.max_num_seqs = max_num_seqs;
    o.kv.block_size = block_size;
    o.kv.tokens = tokens;
    return std::make_unique<Deepseek4Runner>(kDir + "model-f32.gguf", o);
  };
}

// all_logits: every row, prompts included, to compare bit for bit; else only the rows sampled
// from (the head then runs on those rows alone).
EngineConfig ds4_config(int budget, int max_num_seqs, bool all_logits = true) {
  EngineConfig c;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = max_num_seqs;
  c.enable_prefix_caching = false;
  c.all_logits = all_logits;
  return c;
}

// One sequence alone through the model: the whole prompt in one call, then greedy decode one
// token at a time. Logits by position (the row of the token at that position).
struct Lone {
  std::vector<int32_t> tokens;  // generated
  std::map<int, std::vector<float>> logits;
};

Lone run_alone(const std::vector<int32_t>& prompt, int n_gen) {
  auto b = load_deepseek4(kDir + "model-f32.gguf");
  const int64_t V = b->config.n_vocab;
  Deepseek4Model m(b->config, b->weights, 2);
  Deepseek4Cache cache = m.make_cache();
  std::vector<float> out(prompt.size() * V);
  m.forward(prompt, cache, out.data());
  Lone r;
  for (size_t p = 0; p < prompt.size(); ++p) r.logits[static_cast<int>(p)].assign(&out[p * V], &out[(p + 1) * V]);
  int pos = static_cast<int>(prompt.size()) - 1;
  for (int i = 0; i < n_gen; ++i) {
    const std::vector<float>& row = r.logits[pos];
    const auto next = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    r.tokens.push_back(next);
    if (i + 1 == n_gen) break;
    std::vector<float> one(V);
    m.forward({next}, cache, one.data());
    r.logits[++pos] = one;
  }
  return r;
}

std::vector<int32_t> prompt_slice(int start, int n) {
  static const std::vector<int32_t> all = fixture_tokens();
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(all[(start + i) % all.size()]);
  return p;
}

// Every sequence's tokens are the lone run's, and request index 0's logits at every position the
// engine computed are the lone run's bit for bit.
void expect_as_alone(const RunResult& got, const std::vector<Arrival>& arrivals, const std::string& what) {
  for (const Arrival& a : arrivals) {
    const Lone want = run_alone(a.prompt, a.params.max_tokens);
    ASSERT_TRUE(got.seqs.count(a.id)) << what << " " << a.id;
    const auto& seqs = got.seqs.at(a.id);
    ASSERT_EQ(static_cast<int>(seqs.size()), a.params.n) << what << " " << a.id;
    for (size_t i = 0; i < seqs.size(); ++i)
      EXPECT_EQ(seqs[i].tokens, want.tokens) << what << ": tokens of " << a.id << "." << i;
    const auto& rows = got.logits.at(a.id);
    // Every row (all_logits), or one per sampled token.
    const size_t n_rows = rows.size() == want.logits.size() ? rows.size() : static_cast<size_t>(a.params.max_tokens);
    EXPECT_EQ(rows.size(), n_rows) << what << " " << a.id;
    for (const auto& [pos, row] : rows) {
      ASSERT_TRUE(want.logits.count(pos)) << what << ": " << a.id << " has logits at position " << pos;
      ASSERT_EQ(0, std::memcmp(want.logits.at(pos).data(), row.data(), row.size() * sizeof(float)))
          << what << ": logits of " << a.id << " at position " << pos;
    }
  }
}

// After each step: the states alive belong to running sequences and take no more than their fixed
// parts plus what the blocks in use stand for (so no more than the runner's bound); none is left
// once every request has finished.
std::function<void(Engine&)> check_states(int max_num_seqs, int64_t* peak) {
  return [=](Engine& e) {
    auto& r = dynamic_cast<Deepseek4Runner&>(e.runner());
    EXPECT_LE(r.n_states(), static_cast<size_t>(std::min(max_num_seqs, e.counters().n_running)))
        << "a state outlives its sequence's place in the running set (finished or preempted)";
    const auto& pool = e.kv().pool();
    const int64_t used_blocks = pool.n_blocks() - pool.n_free();
    EXPECT_LE(r.state_bytes(),
              static_cast<int64_t>(r.n_states()) * r.state_bound().fixed_bytes + used_blocks * r.block_bytes());
    EXPECT_LE(r.state_bytes(), r.memory_bound());
    *peak = std::max(*peak, r.state_bytes());
    if (!e.has_unfinished()) {
      EXPECT_EQ(r.n_states(), 0u) << "a finished sequence's state was not freed";
    }
  };
}

std::vector<Arrival> mixed_arrivals() {
  std::vector<Arrival> a;
  a.push_back({"full", fixture_tokens(), greedy(5), 0});  // transformers' prompt
  const int lens[] = {1, 9, 130, 37, 5, 200};
  const int at[] = {0, 1, 1, 3, 6, 9};
  for (int i = 0; i < 6; ++i)
    a.push_back({"q" + std::to_string(i), prompt_slice(11 * i + 3, lens[i]), greedy(3 + i % 4), at[i]});
  return a;
}

TEST(Deepseek4Engine, ConcurrentChunkedRequestsMatchLoneRuns) {
  const std::vector<Arrival> arrivals = mixed_arrivals();
  for (int budget : {7, 23, 2048}) {
    for (bool all_logits : {true, false}) {
      int64_t peak = 0;
      const RunResult got = run_engine(ds4_runner(16, 4096, 8), ds4_config(budget, 8, all_logits), arrivals, nullptr,
                                       nullptr, check_states(8, &peak));
      expect_as_alone(got, arrivals, fmt::format("budget {}, all_logits {}", budget, all_logits));
      EXPECT_GT(peak, 0);
    }
  }
}

// The engine's prompt rows of the fixture prompt against transformers' logits (Deepseek4Forward's
// tolerance: relative to the position's largest |logit|), with the greedy token at every position.
TEST(Deepseek4Engine, PromptLogitsMatchTransformers) {
  const std::vector<Arrival> arrivals = mixed_arrivals();
  const RunResult got = run_engine(ds4_runner(16, 4096, 8), ds4_config(13, 8), arrivals);
  const std::vector<int32_t> tokens = fixture_tokens();
  const size_t V = got.logits.at("full").begin()->second.size(), T = tokens.size();
  std::vector<float> want(T * V);
  std::ifstream in(kDir + "logits.f32", std::ios::binary);
  in.read(reinterpret_cast<char*>(want.data()), static_cast<std::streamsize>(want.size() * sizeof(float)));
  ASSERT_EQ(static_cast<size_t>(in.gcount()), want.size() * sizeof(float));
  double worst = 0;
  for (size_t t = 0; t < T; ++t) {
    const std::vector<float>& row = got.logits.at("full").at(static_cast<int>(t));
    double diff = 0, mag = 0;
    for (size_t v = 0; v < V; ++v) {
      diff = std::max(diff, static_cast<double>(std::fabs(row[v] - want[t * V + v])));
      mag = std::max(mag, static_cast<double>(std::fabs(want[t * V + v])));
    }
    worst = std::max(worst, diff / mag);
    EXPECT_EQ(std::max_element(row.begin(), row.end()) - row.begin(),
              std::max_element(want.begin() + t * V, want.begin() + (t + 1) * V) - (want.begin() + t * V))
        << "greedy token differs at position " << t;
  }
  EXPECT_LE(worst, 1e-4);
}

// 6 blocks of 16 tokens for three requests of 29..31 prompt tokens and 8 more each: all three
// fit their prompts, then decode runs out of blocks and the engine preempts (the victim computes
// again from position 0 on a fresh state); the tokens and logits stay the lone ones.
TEST(Deepseek4Engine, PreemptionRecomputesToTheSameTokens) {
  std::vector<Arrival> a;
  const int lens[] = {30, 31, 29};
  for (int i = 0; i < 3; ++i) a.push_back({"p" + std::to_string(i), prompt_slice(17 * i, lens[i]), greedy(8), 0});
  int64_t peak = 0;
  const RunResult got =
      run_engine(ds4_runner(16, 96, 4), ds4_config(64, 4), a, nullptr, nullptr, check_states(4, &peak));
  EXPECT_GT(got.counters.n_preemptions, 0);
  expect_as_alone(got, a, "preemption");
}

// n = 3: the siblings continue from copies of the parent's state (each with blocks of its own),
// beside other requests and under preemption.
TEST(Deepseek4Engine, ForkedSiblingsContinueLikeTheParent) {
  for (int64_t tokens : {4096, 112}) {
    std::vector<Arrival> a;
    a.push_back({"fork", prompt_slice(5, 45), greedy(6), 0});
    a.back().params.n = 3;
    a.push_back({"other", prompt_slice(60, 30), greedy(4), 1});
    int64_t peak = 0;
    const RunResult got =
        run_engine(ds4_runner(16, tokens, 4), ds4_config(16, 4), a, nullptr, nullptr, check_states(4, &peak));
    expect_as_alone(got, a, "n=3, " + std::to_string(tokens) + " tokens");
  }
}

// What a block stands for, and a pool too small for the fixed parts: refused with the numbers.
TEST(Deepseek4Engine, MemoryBudgetCountsFixedPartsPerSequence) {
  Deepseek4RunnerOptions o;
  o.max_num_seqs = 4;
  o.kv.block_size = 16;
  const Ds4StateBound bound = deepseek4_state_bound(load_deepseek4(kDir + "model-f32.gguf")->config);
  o.kv.memory_bytes = bound.fixed_bytes * 4 + 10 * static_cast<int64_t>(std::ceil(bound.bytes_per_token * 16));
  Deepseek4Runner r(kDir + "model-f32.gguf", o);
  EXPECT_EQ(r.kv_blocks(), 10);
  EXPECT_LE(r.memory_bound(), o.kv.memory_bytes);
  o.kv.memory_bytes = bound.fixed_bytes * 4 - 1;
  try {
    Deepseek4Runner small(kDir + "model-f32.gguf", o);
    ADD_FAILURE() << "a budget below the fixed parts was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fixed per running sequence"), std::string::npos) << e.what();
  }
}

TEST(Deepseek4Engine, PrefixCachingIsRefused) {
  EngineConfig c = ds4_config(16, 4);
  c.enable_prefix_caching = true;
  try {
    Engine e(ds4_runner(16, 256, 4)(), c);
    ADD_FAILURE() << "prefix caching was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("prefix caching"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mla::testing
