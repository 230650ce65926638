// Prompt logprobs on the real deepseek2 forward: each prompt token's logprob, rank and top-k
// against a log-softmax this test computes (in double) from the raw logits rows of a run that
// asks the engine for every row (EngineConfig::all_logits, no prompt logprobs). The engine's values
// must not depend on chunking (token budgets, the logits-row cap), on a prefix-cache hit that a
// request with prompt logprobs does not take, on batching, on preemption, or on the MLA path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "../model/model_test_util.h"
#include "../support/model_engine.h"
#include "engine_harness.h"

namespace mla::testing {
namespace {

const std::string kFixtureModel =
    std::string(MLA_SOURCE_DIR) + "/tests/fixtures/reference/deepseek-v3-tiny/model-f32.gguf";
constexpr int kTopK = 3;

std::vector<int32_t> prompt_of(int n, int seed, int n_vocab) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(static_cast<int32_t>((seed * 37 + i * 53 + i * i * 11) % n_vocab));
  return p;
}

SamplingParams scored(int max_tokens, std::optional<int> prompt_logprobs = kTopK) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.prompt_logprobs = prompt_logprobs;
  return p;
}

// The expected entry for the token at position + 1 from the raw row at position.
SampleLogprobs expected_entry(const std::vector<float>& row, int32_t token) {
  double m = -INFINITY;
  for (float x : row) m = std::max(m, static_cast<double>(x));
  double sum = 0;
  for (float x : row) sum += std::exp(static_cast<double>(x) - m);
  const double lse = m + std::log(sum);
  SampleLogprobs e;
  e.sampled = {token, static_cast<float>(row[token] - lse)};
  e.rank = 1;
  for (float x : row) e.rank += x > row[token] ? 1 : 0;
  std::vector<int32_t> ids(row.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
  for (int i = 0; i < kTopK; ++i) e.top.push_back({ids[i], static_cast<float>(row[ids[i]] - lse)});
  return e;
}

void expect_entries(const std::vector<SampleLogprobs>& want, const std::vector<SampleLogprobs>& got,
                    const std::string& what, double tol) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(want[i].sampled.token, got[i].sampled.token) << what << " position " << i + 1;
    EXPECT_NEAR(want[i].sampled.logprob, got[i].sampled.logprob, tol) << what << " position " << i + 1;
    EXPECT_EQ(want[i].rank, got[i].rank) << what << " position " << i + 1;
    ASSERT_EQ(want[i].top.size(), got[i].top.size()) << what;
    for (size_t k = 0; k < want[i].top.size(); ++k) {
      EXPECT_EQ(want[i].top[k].token, got[i].top[k].token) << what << " position " << i + 1 << " top " << k;
      EXPECT_NEAR(want[i].top[k].logprob, got[i].top[k].logprob, tol) << what << " position " << i + 1;
    }
  }
}

// What every prompt position should give, from a run with every row's logits.
std::vector<SampleLogprobs> reference(const std::string& file, MlaPathPolicy policy, GgmlType dtype,
                                      const std::vector<int32_t>& prompt) {
  EngineConfig cfg = config(policy, 2048, false);
  cfg.all_logits = true;
  auto r = run_engine(deepseek2_runner(file, policy, {.block_size = 16, .tokens = 512, .dtype = dtype}), cfg,
                      {{"ref", prompt, scored(1, std::nullopt), 0}});
  std::vector<SampleLogprobs> want;
  for (size_t p = 0; p + 1 < prompt.size(); ++p)
    want.push_back(expected_entry(r.logits.at("ref").at(static_cast<int>(p)), prompt[p + 1]));
  return want;
}

class PromptLogprobs : public ::testing::TestWithParam<MlaPathPolicy> {};

TEST_P(PromptLogprobs, EqualTheLogSoftmaxOfTheRowsWhateverTheChunkingBatchCacheAndPreemption) {
  const MlaPathPolicy policy = GetParam();
  const int n_vocab = static_cast<int>(load_deepseek2(kFixtureModel, {})->config.n_vocab);
  const auto long_prompt = prompt_of(45, 1, n_vocab);
  const auto short_prompt = prompt_of(6, 2, n_vocab);
  const auto want_long = reference(kFixtureModel, policy, GgmlType::F16, long_prompt);
  const auto want_short = reference(kFixtureModel, policy, GgmlType::F16, short_prompt);

  // A request without prompt logprobs warms the prefix cache with the long prompt; the scored
  // one arrives later and must still get every position. Others decode alongside.
  std::vector<Arrival> all = {
      {"warm", long_prompt, scored(2, std::nullopt), 0},
      {"other", prompt_of(20, 3, n_vocab), scored(6, 2), 0},
      {"long", long_prompt, scored(3), 3},
      {"short", short_prompt, scored(0), 4},
      {"one", {long_prompt[0]}, scored(2), 4},
      {"decode", prompt_of(9, 4, n_vocab), scored(8, std::nullopt), 5},
  };
  struct Setup {
    std::string name;
    int budget;
    int logits_rows;
    int block_size;
    int64_t tokens;
  };
  for (const Setup& s : {Setup{"budget 2048", 2048, 256, 16, 512}, Setup{"budget 7", 7, 256, 16, 512},
                         Setup{"logits rows 5", 2048, 5, 16, 512}, Setup{"preemption", 16, 256, 8, 64}}) {
    EngineConfig cfg = config(policy, s.budget, true);
    cfg.max_prompt_logits_rows = s.logits_rows;
    auto got =
        run_engine(deepseek2_runner(kFixtureModel, policy, {.block_size = s.block_size, .tokens = s.tokens}), cfg, all);
    ASSERT_TRUE(got.prompt_logprobs.count("long")) << s.name;
    expect_entries(want_long, got.prompt_logprobs.at("long"), s.name + " long", 1e-6);
    expect_entries(want_short, got.prompt_logprobs.at("short"), s.name + " short", 1e-6);
    EXPECT_FALSE(got.prompt_logprobs.count("one")) << "a 1-token prompt has no prompt logprobs";
    EXPECT_FALSE(got.prompt_logprobs.count("warm"));
    EXPECT_FALSE(got.prompt_logprobs.count("decode"));
    // The scored request took nothing from the cache; max_tokens 0 sampled nothing.
    EXPECT_EQ(got.n_cached.at("long"), 0) << s.name;
    EXPECT_TRUE(got.seqs.at("short")[0].tokens.empty()) << s.name;
    EXPECT_EQ(got.seqs.at("short")[0].finish, FinishReason::kLength) << s.name;
    EXPECT_EQ(got.seqs.at("long")[0].tokens.size(), 3u) << s.name;
    if (s.name == "preemption") {
      EXPECT_GT(got.counters.n_preemptions, 0);
    }
    if (s.name == "logits rows 5") {
      EXPECT_GE(got.n_steps, 44 / 5);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, PromptLogprobs, ::testing::Values(MlaPathPolicy::Mha, MlaPathPolicy::Mqa),
                         [](const auto& info) { return std::string(mla_path_policy_name(info.param)); });

TEST(PromptLogprobsPaths, TheTwoMlaPathsAgreeWithin1e4) {
  // F32 cache: the paths differ only in their own rounding.
  const int n_vocab = static_cast<int>(load_deepseek2(kFixtureModel, {})->config.n_vocab);
  const auto prompt = prompt_of(40, 5, n_vocab);
  std::map<MlaPathPolicy, std::vector<SampleLogprobs>> got;
  for (MlaPathPolicy policy : {MlaPathPolicy::Mha, MlaPathPolicy::Mqa}) {
    auto r =
        run_engine(deepseek2_runner(kFixtureModel, policy, {.block_size = 16, .tokens = 512, .dtype = GgmlType::F32}),
                   config(policy, 2048, true), {{"p", prompt, scored(0), 0}});
    got[policy] = r.prompt_logprobs.at("p");
  }
  const auto& mha = got[MlaPathPolicy::Mha];
  const auto& mqa = got[MlaPathPolicy::Mqa];
  ASSERT_EQ(mha.size(), prompt.size() - 1);
  ASSERT_EQ(mqa.size(), mha.size());
  for (size_t i = 0; i < mha.size(); ++i)
    EXPECT_NEAR(mha[i].sampled.logprob, mqa[i].sampled.logprob, 1e-4) << "position " << i + 1;
}

}  // namespace
}  // namespace mla::testing
