// MoE routing against its reference on random logits, and hand-checked cases for each rule
// (bias steers selection only, group limit, top-2 group scoring, normalisation and scale).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/moe.h"

namespace mla {
namespace {

struct Routed {
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

Routed route(const MoeRouting& r, const std::vector<float>& logits) {
  Routed o{std::vector<int32_t>(r.n_expert_used), std::vector<float>(r.n_expert_used)};
  std::vector<float> scratch(2 * r.n_expert + r.n_group);
  moe_route(r, logits.data(), o.experts.data(), o.weights.data(), scratch.data());
  return o;
}

TEST(MoeRouting, MatchesReferenceOnRandomLogits) {
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0, 2);
  for (int trial = 0; trial < 400; ++trial) {
    MoeRouting r;
    r.n_expert = 16;
    r.n_group = (trial % 3 == 0) ? 1 : (trial % 3 == 1 ? 4 : 8);
    r.n_group_used = r.n_group == 1 ? 1 : 1 + trial % 2;
    r.n_expert_used = std::min(4, r.n_group_used * (r.n_expert / r.n_group));
    r.gating = trial % 2 ? MoeGating::Sigmoid : MoeGating::Softmax;
    r.norm_weights = trial % 4 < 2;
    r.weights_scale = trial % 5 == 0 ? 2.5f : 1.0f;
    std::vector<float> logits(16), bias(16);
    for (auto& x : logits) x = d(rng);
    for (auto& x : bias) x = d(rng) * 0.1f;
    if (trial % 2) r.bias = bias.data();
    auto fast = route(r, logits);
    std::vector<int32_t> ref_e(r.n_expert_used);
    std::vector<float> ref_w(r.n_expert_used);
    moe_route_ref(r, logits.data(), ref_e.data(), ref_w.data());
    ASSERT_EQ(fast.experts, ref_e) << "trial " << trial;
    for (int k = 0; k < r.n_expert_used; ++k) EXPECT_NEAR(fast.weights[k], ref_w[k], 1e-6 * (1 + ref_w[k]));
  }
}

TEST(MoeRouting, SigmoidWithBiasSelectsByBiasButWeighsWithoutIt) {
  MoeRouting r;
  r.n_expert = 4;
  r.n_expert_used = 2;
  r.gating = MoeGating::Sigmoid;
  std::vector<float> logits = {2.0f, 1.0f, 0.0f, -1.0f};
  std::vector<float> bias = {0.0f, 0.0f, 0.0f, 1.0f};  // pushes expert 3 above expert 1
  r.bias = bias.data();
  auto o = route(r, logits);
  EXPECT_EQ(o.experts, (std::vector<int32_t>{0, 3}));
  auto sig = [](double x) { return 1 / (1 + std::exp(-x)); };
  EXPECT_NEAR(o.weights[0], sig(2), 1e-6);
  EXPECT_NEAR(o.weights[1], sig(-1), 1e-6);
  r.norm_weights = true;
  r.weights_scale = 2.5f;
  o = route(r, logits);
  EXPECT_NEAR(o.weights[0], 2.5 * sig(2) / (sig(2) + sig(-1)), 1e-6);
  EXPECT_NEAR(o.weights[1], 2.5 * sig(-1) / (sig(2) + sig(-1)), 1e-6);
}

TEST(MoeRouting, GroupLimitUsesSumOfTopTwo) {
  // Group 0 = experts 0-2 holds the single best expert, group 1 = 3-5 the better top-2 sum.
  MoeRouting r;
  r.n_expert = 6;
  r.n_expert_used = 2;
  r.n_group = 2;
  r.n_group_used = 1;
  r.gating = MoeGating::Softmax;
  std::vector<float> logits = {3.0f, -5.0f, -5.0f, 2.5f, 2.5f, -5.0f};
  auto o = route(r, logits);
  EXPECT_EQ(o.experts, (std::vector<int32_t>{3, 4}));
  // Softmax over all experts, not just the kept group.
  double z = 0;
  for (float l : logits) z += std::exp(l);
  EXPECT_NEAR(o.weights[0], std::exp(2.5) / z, 1e-6);
}

}  // namespace
}  // namespace mla
