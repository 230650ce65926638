// The derived hyper-parameters of the converter-written fixture files against the values
// tools/reference/NOTES.md lists from transformers (softmax scale, YaRN ramp ends, dims).
#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "model/config.h"
#include "model/weights.h"

namespace mla {
namespace {

std::string fixture(const char* model) {
  return std::string(MLA_TEST_DIR) + "/fixtures/reference/" + model + "/model-f32.gguf";
}

TEST(ReferenceConfig, DeepseekV3Tiny) {
  auto f = GgufFile::open(fixture("deepseek-v3-tiny"));
  DeepseekConfig c = load_deepseek_config(*f);
  EXPECT_FALSE(c.is_lite);
  EXPECT_EQ(c.q_lora_rank, 96);
  EXPECT_EQ(c.qk_nope, 32);
  EXPECT_EQ(c.qk_rope, 16);
  EXPECT_EQ(c.v_head, 32);
  EXPECT_EQ(c.gating, MoeGating::Sigmoid);
  EXPECT_NEAR(c.attn_mscale, 1.1386294, 1e-7);
  EXPECT_NEAR(c.kq_scale, 0.18713034, 1e-8);
  double dims[2];
  rope_yarn_corr_dims(c.rope, dims);
  EXPECT_EQ(dims[0], 2);
  EXPECT_EQ(dims[1], 6);
  DeepseekWeights w = bind_deepseek_weights(*f, c);
  EXPECT_EQ(w.layout, MlaLayout::Split);
  EXPECT_EQ(w.layers[1].exp_probs_b.size(), 8u);
}

TEST(ReferenceConfig, DeepseekV2LiteTiny) {
  auto f = GgufFile::open(fixture("deepseek-v2-lite-tiny"));
  DeepseekConfig c = load_deepseek_config(*f);
  EXPECT_TRUE(c.is_lite);
  EXPECT_EQ(c.qk_nope, 32);
  EXPECT_EQ(c.qk_rope, 32);
  EXPECT_EQ(c.v_head, 48);
  EXPECT_EQ(c.gating, MoeGating::Softmax);
  EXPECT_FALSE(c.expert_weights_norm);
  EXPECT_NEAR(c.attn_mscale, 1.2608038, 1e-7);
  EXPECT_NEAR(c.kq_scale, 0.19870327, 1e-8);
  double dims[2];
  rope_yarn_corr_dims(c.rope, dims);
  EXPECT_EQ(dims[0], 5);
  EXPECT_EQ(dims[1], 12);
}

}  // namespace
}  // namespace mla
