// Sampler: greedy, seeded reproducibility, distributions of temperature / top_k / top_p / min_p
// on a known logit vector, penalties and logit_bias against a hand-computed example, logprobs.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/sampler.h"

namespace mla {
namespace {

// logits = log p for p = (0.4, 0.3, 0.2, 0.1): softmax gives p back.
std::vector<float> known_logits() { return {std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f)}; }

// Frequencies of n draws.
std::vector<double> draw(const SamplingParams& p, int n, uint64_t seed = 7) {
  Sampler s(4);
  PenaltyState pen;
  Rng rng(seed);
  auto logits = known_logits();
  std::vector<double> freq(4, 0.0);
  for (int i = 0; i < n; ++i) freq[s.sample(logits.data(), p, pen, 0, {}, rng).token] += 1.0 / n;
  return freq;
}

// Each frequency within 5 standard errors of its expected probability.
void expect_distribution(const std::vector<double>& freq, const std::vector<double>& expected, int n) {
  for (size_t i = 0; i < expected.size(); ++i) {
    const double se = std::sqrt(std::max(expected[i] * (1 - expected[i]), 1e-12) / n);
    if (expected[i] == 0.0)
      EXPECT_EQ(freq[i], 0.0) << "token " << i;
    else
      EXPECT_NEAR(freq[i], expected[i], 5 * se) << "token " << i;
  }
}

constexpr int kDraws = 40000;

TEST(Sampler, GreedyTakesTheArgmaxAndTheLowerIdOnTies) {
  Sampler s(5);
  PenaltyState pen;
  Rng rng(1);
  SamplingParams p;
  p.temperature = 0;
  std::vector<float> l = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  EXPECT_EQ(s.sample(l.data(), p, pen, 0, {}, rng).token, 1);
}

TEST(Sampler, TemperatureOneFollowsSoftmax) {
  SamplingParams p;
  expect_distribution(draw(p, kDraws), {0.4, 0.3, 0.2, 0.1}, kDraws);
}

TEST(Sampler, TemperatureTwoFlattens) {
  SamplingParams p;
  p.temperature = 2.0f;
  // p_i^(1/2) normalized.
  double z = std::sqrt(0.4) + std::sqrt(0.3) + std::sqrt(0.2) + std::sqrt(0.1);
  expect_distribution(draw(p, kDraws), {std::sqrt(0.4) / z, std::sqrt(0.3) / z, std::sqrt(0.2) / z, std::sqrt(0.1) / z},
                      kDraws);
}

TEST(Sampler, TopKKeepsTheKMostLikely) {
  SamplingParams p;
  p.top_k = 2;
  expect_distribution(draw(p, kDraws), {4.0 / 7, 3.0 / 7, 0, 0}, kDraws);
}

TEST(Sampler, TopPKeepsTheSmallestSetReachingP) {
  SamplingParams p;
  p.top_p = 0.65f;  // 0.4 + 0.3 >= 0.65
  expect_distribution(draw(p, kDraws), {4.0 / 7, 3.0 / 7, 0, 0}, kDraws);
  p.top_p = 0.75f;  // needs the third token too
  expect_distribution(draw(p, kDraws), {4.0 / 9, 3.0 / 9, 2.0 / 9, 0}, kDraws);
  p.top_p = 0.3f;
  expect_distribution(draw(p, 1000), {1, 0, 0, 0}, 1000);
}

TEST(Sampler, MinPDropsTokensBelowAFractionOfTheMax) {
  SamplingParams p;
  p.min_p = 0.6f;  // threshold 0.24: keeps 0.4 and 0.3
  expect_distribution(draw(p, kDraws), {4.0 / 7, 3.0 / 7, 0, 0}, kDraws);
  p.min_p = 0.45f;  // threshold 0.18: keeps 0.4, 0.3, 0.2
  expect_distribution(draw(p, kDraws), {4.0 / 9, 3.0 / 9, 2.0 / 9, 0}, kDraws);
}

TEST(Sampler, TopKThenTopP) {
  SamplingParams p;
  p.top_k = 3;     // 0.4 0.3 0.2 → 4/9 3/9 2/9
  p.top_p = 0.7f;  // 4/9 = 0.444 < 0.7, + 3/9 = 0.778 >= 0.7
  expect_distribution(draw(p, kDraws), {4.0 / 7, 3.0 / 7, 0, 0}, kDraws);
}

TEST(Sampler, SameSeedSameTokensOtherSeedOtherTokens) {
  SamplingParams p;
  auto sequence = [&](uint64_t seed) {
    Sampler s(4);
    PenaltyState pen;
    Rng rng(seed);
    auto l = known_logits();
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.sample(l.data(), p, pen, i, {}, rng).token);
    return out;
  };
  EXPECT_EQ(sequence(42), sequence(42));
  EXPECT_NE(sequence(42), sequence(43));
}

TEST(Sampler, PenaltiesAndLogitBiasMatchAHandComputedExample) {
  Sampler s(6);
  PenaltyState pen;
  pen.set_prompt(std::vector<int32_t>{0, 1, 0});
  for (int32_t t : {2, 2, 3}) pen.add_output(t);
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  p.logit_bias = {{4, 1.5f}, {5, -1.0f}};
  Rng rng(0);
  std::vector<float> l = {1.0f, -1.0f, 2.0f, 0.5f, 0.0f, 0.75f};
  // bias: l4 = 1.5, l5 = -0.25. repetition (tokens 0 1 2 3): 0.5, -2, 1, 0.25.
  // frequency/presence: token 2 (x2): 1 - 1 - 0.25 = -0.25; token 3 (x1): 0.25 - 0.5 - 0.25.
  const std::vector<float> want = {0.5f, -2.0f, -0.25f, -0.5f, 1.5f, -0.25f};
  EXPECT_EQ(s.sample(l.data(), p, pen, 3, {}, rng).token, 4);
  auto got = s.last_processed();
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(got[i], want[i]) << i;
}

TEST(Sampler, MinTokensMasksEosAndStopTokens) {
  Sampler s(4);
  PenaltyState pen;
  Rng rng(0);
  SamplingParams p;
  p.temperature = 0;
  p.min_tokens = 2;
  p.stop_token_ids = {1};
  std::vector<float> l = {3.0f, 2.0f, 1.0f, 0.0f};
  const std::vector<int32_t> eos = {0};
  EXPECT_EQ(s.sample(l.data(), p, pen, 0, eos, rng).token, 2);
  EXPECT_EQ(s.sample(l.data(), p, pen, 1, eos, rng).token, 2);
  EXPECT_EQ(s.sample(l.data(), p, pen, 2, eos, rng).token, 0);
  p.ignore_eos = true;
  EXPECT_EQ(s.sample(l.data(), p, pen, 0, eos, rng).token, 0);
}

TEST(Sampler, LogprobsAreRawLogSoftmax) {
  Sampler s(4);
  PenaltyState pen;
  Rng rng(3);
  SamplingParams p;
  p.temperature = 0;
  p.logit_bias = {{3, 50.0f}};  // changes the choice, not the reported logprobs
  p.logprobs = 2;
  auto l = known_logits();
  for (float& x : l) x += 5.0f;  // shift-invariant
  auto r = s.sample(l.data(), p, pen, 0, {}, rng);
  ASSERT_TRUE(r.logprobs);
  EXPECT_EQ(r.token, 3);
  EXPECT_EQ(r.logprobs->sampled.token, 3);
  EXPECT_NEAR(r.logprobs->sampled.logprob, std::log(0.1), 1e-6);
  ASSERT_EQ(r.logprobs->top.size(), 2u);
  EXPECT_EQ(r.logprobs->top[0].token, 0);
  EXPECT_NEAR(r.logprobs->top[0].logprob, std::log(0.4), 1e-6);
  EXPECT_EQ(r.logprobs->top[1].token, 1);
  EXPECT_NEAR(r.logprobs->top[1].logprob, std::log(0.3), 1e-6);
}

TEST(SamplingParams, ValidateNamesTheField) {
  SamplingParams p;
  p.top_p = 0;
  try {
    p.validate(10);
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("top_p"), std::string::npos);
  }
  p = {};
  p.logit_bias = {{10, 1.0f}};
  EXPECT_THROW(p.validate(10), std::exception);
  p = {};
  p.min_tokens = 20;
  EXPECT_THROW(p.validate(10), std::exception);
  p = {};
  EXPECT_NO_THROW(p.validate(10));
}

}  // namespace
}  // namespace mla
