// DeepseekConfig: keys read through the table, derived sizes, the YaRN attention scale as
// transformers computes it, and one clear error per invalid or inconsistent value.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "gguf/gguf.h"
#include "model/config.h"
#include "util/error.h"

namespace mla {
namespace {

// DeepSeek-V2-Lite-like metadata at toy size (MLA file: head_count_kv 1, *_mla keys).
GgufWriter base_keys() {
  GgufWriter w;
  auto u = [](int64_t v) { return GgufValue::u32(static_cast<uint32_t>(v)); };
  w.set("general.architecture", GgufValue::str("deepseek2"));
  w.set("deepseek2.block_count", u(3));
  w.set("deepseek2.context_length", u(163840));
  w.set("deepseek2.embedding_length", u(128));
  w.set("deepseek2.feed_forward_length", u(256));
  w.set("deepseek2.attention.head_count", u(4));
  w.set("deepseek2.attention.head_count_kv", u(1));
  w.set("deepseek2.attention.layer_norm_rms_epsilon", GgufValue::f32(1e-6f));
  w.set("deepseek2.attention.kv_lora_rank", u(96));
  w.set("deepseek2.attention.key_length", u(96 + 32));
  w.set("deepseek2.attention.value_length", u(96));
  w.set("deepseek2.attention.key_length_mla", u(64));
  w.set("deepseek2.attention.value_length_mla", u(48));
  w.set("deepseek2.rope.dimension_count", u(32));
  w.set("deepseek2.rope.freq_base", GgufValue::f32(10000));
  w.set("deepseek2.rope.scaling.type", GgufValue::str("yarn"));
  w.set("deepseek2.rope.scaling.factor", GgufValue::f32(40));
  w.set("deepseek2.rope.scaling.original_context_length", u(4096));
  w.set("deepseek2.rope.scaling.yarn_log_multiplier", GgufValue::f32(0.1f * 0.707f));
  w.set("deepseek2.expert_count", u(8));
  w.set("deepseek2.expert_used_count", u(3));
  w.set("deepseek2.expert_shared_count", u(2));
  w.set("deepseek2.expert_feed_forward_length", u(32));
  w.set("deepseek2.expert_weights_scale", GgufValue::f32(1));
  w.set("deepseek2.leading_dense_block_count", u(1));
  w.set("deepseek2.vocab_size", u(512));
  return w;
}

DeepseekConfig load(const GgufWriter& w) {
  auto bytes = w.to_bytes();
  auto f = GgufFile::parse(bytes.data(), bytes.size(), "toy.gguf");
  return load_deepseek_config(*f);
}

std::string error_of(const std::function<void(GgufWriter&)>& edit) {
  GgufWriter w = base_keys();
  edit(w);
  try {
    load(w);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(DeepseekConfig, ReadsAndDerives) {
  DeepseekConfig c = load(base_keys());
  EXPECT_EQ(c.n_layer, 3);
  EXPECT_TRUE(c.is_lite);
  EXPECT_TRUE(c.has_mla_keys);
  EXPECT_EQ(c.qk_rope, 32);
  EXPECT_EQ(c.qk_nope, 32);
  EXPECT_EQ(c.qk_head, 64);
  EXPECT_EQ(c.v_head, 48);
  EXPECT_EQ(c.latent_dim, 128);
  EXPECT_EQ(c.gating, MoeGating::Softmax);  // no expert_gating_func: llama.cpp's V2 default
  EXPECT_EQ(c.n_expert_groups, 1);
  EXPECT_TRUE(c.layer_is_moe(1));
  EXPECT_FALSE(c.layer_is_moe(0));
  // transformers DeepseekV3Attention: scaling = qk_head^-0.5 * mscale², with
  // mscale = 0.1 * mscale_all_dim * ln(factor) + 1; cos/sin amplitude mscale/mscale_all_dim = 1.
  const double mscale = 0.1 * 0.707 * std::log(40.0) + 1.0;
  EXPECT_NEAR(c.kq_scale, mscale * mscale / 8.0, 1e-6);
  EXPECT_NEAR(c.rope.attn_factor, 1.0, 1e-12);
  EXPECT_NEAR(c.rope.freq_scale, 1.0 / 40, 1e-12);
  EXPECT_EQ(c.rope.ext_factor, 1);
  EXPECT_EQ(c.rope.n_ctx_orig, 4096);
  EXPECT_EQ(c.rope.beta_fast, 32);
  EXPECT_EQ(c.rope.beta_slow, 1);
}

TEST(DeepseekConfig, YarnWithoutMscaleAllDimScalesCosSin) {
  GgufWriter w = base_keys();
  w.remove("deepseek2.rope.scaling.yarn_log_multiplier");
  DeepseekConfig c = load(w);
  EXPECT_NEAR(c.rope.attn_factor, 0.1 * std::log(40.0) + 1.0, 1e-9);
  EXPECT_NEAR(c.kq_scale, 1.0 / 8.0, 1e-7);
}

TEST(DeepseekConfig, NoScaling) {
  GgufWriter w = base_keys();
  w.remove("deepseek2.rope.scaling.type");
  DeepseekConfig c = load(w);
  EXPECT_EQ(c.rope.freq_scale, 1);
  EXPECT_EQ(c.rope.ext_factor, 0);
  EXPECT_NEAR(c.kq_scale, 1.0 / 8.0, 1e-7);
}

TEST(DeepseekConfig, QLoraAndSigmoidGating) {
  GgufWriter w = base_keys();
  w.set("deepseek2.attention.q_lora_rank", GgufValue::u32(64));
  w.set("deepseek2.expert_gating_func", GgufValue::u32(2));
  w.set("deepseek2.expert_group_count", GgufValue::u32(4));
  w.set("deepseek2.expert_group_used_count", GgufValue::u32(2));
  DeepseekConfig c = load(w);
  EXPECT_FALSE(c.is_lite);
  EXPECT_EQ(c.gating, MoeGating::Sigmoid);
  EXPECT_EQ(c.n_expert_groups, 4);
}

TEST(DeepseekConfig, DescribeMentionsDerivedValues) {
  std::string s = describe_deepseek_config(load(base_keys()));
  EXPECT_NE(s.find("qk_nope / qk_rope / v_head   32 / 32 / 48"), std::string::npos) << s;
  EXPECT_NE(s.find("yarn"), std::string::npos);
  EXPECT_NE(s.find("attention scale"), std::string::npos);
}

struct BadCase {
  const char* what;
  std::function<void(GgufWriter&)> edit;
  const char* message;
};

TEST(DeepseekConfig, InvalidValuesGiveOneClearError) {
  auto u = [](int64_t v) { return GgufValue::u32(static_cast<uint32_t>(v)); };
  const BadCase cases[] = {
      {"missing key", [](GgufWriter& w) { w.remove("deepseek2.attention.kv_lora_rank"); },
       "missing required key 'deepseek2.attention.kv_lora_rank'"},
      {"wrong arch", [](GgufWriter& w) { w.set("general.architecture", GgufValue::str("llama")); },
       "general.architecture is 'llama', expected 'deepseek2', 'deepseek32' or 'glm-dsa'"},
      {"deepseek4", [](GgufWriter& w) { w.set("general.architecture", GgufValue::str("deepseek4")); },
       "general.architecture 'deepseek4' (DeepSeek-V4) is not a deepseek2-family file: mla run, serve and bench run "
       "it; this command does not"},
      {"wrong key type", [](GgufWriter& w) { w.set("deepseek2.block_count", GgufValue::str("3")); },
       "deepseek2.block_count"},
      {"groups", [&](GgufWriter& w) { w.set("deepseek2.expert_group_count", u(3)); },
       "expert_count 8 is not divisible by expert_group_count 3"},
      {"groups used",
       [&](GgufWriter& w) {
         w.set("deepseek2.expert_group_count", u(2));
         w.set("deepseek2.expert_group_used_count", u(3));
       },
       "expert_group_used_count is 3, expected 1 to expert_group_count 2"},
      {"experts used", [&](GgufWriter& w) { w.set("deepseek2.expert_used_count", u(9)); },
       "expert_used_count is 9, expected 1 to expert_count 8"},
      {"experts in groups",
       [&](GgufWriter& w) {
         w.set("deepseek2.expert_group_count", u(4));
         w.set("deepseek2.expert_group_used_count", u(1));
       },
       "expert_used_count 3 exceeds the 2 experts of the 1 selected group(s)"},
      {"gating", [&](GgufWriter& w) { w.set("deepseek2.expert_gating_func", u(3)); },
       "expert_gating_func is 3, expected 1 (softmax) or 2 (sigmoid)"},
      {"rope type", [](GgufWriter& w) { w.set("deepseek2.rope.scaling.type", GgufValue::str("longrope")); },
       "rope.scaling.type 'longrope' is not supported"},
      {"odd rope", [&](GgufWriter& w) { w.set("deepseek2.rope.dimension_count", u(31)); },
       "rope.dimension_count is 31, expected an even value >= 2"},
      {"rope too wide", [&](GgufWriter& w) { w.set("deepseek2.rope.dimension_count", u(64)); },
       "key_length_mla 64 must exceed rope.dimension_count 64"},
      {"head_count_kv", [&](GgufWriter& w) { w.set("deepseek2.attention.head_count_kv", u(2)); },
       "attention.head_count_kv is 2, expected 1 (MLA file) or head_count 4"},
      {"key_length", [&](GgufWriter& w) { w.set("deepseek2.attention.key_length", u(100)); },
       "attention.key_length 100 != kv_lora_rank + rope.dimension_count = 128"},
      {"dense lead", [&](GgufWriter& w) { w.set("deepseek2.leading_dense_block_count", u(4)); },
       "leading_dense_block_count 4 exceeds block_count 3"},
      {"no experts", [&](GgufWriter& w) { w.remove("deepseek2.expert_count"); },
       "expert_count is 0, expected >= 1 for MoE blocks"},
      {"eps", [](GgufWriter& w) { w.set("deepseek2.attention.layer_norm_rms_epsilon", GgufValue::f32(0)); },
       "layer_norm_rms_epsilon is 0"},
      {"yarn factor", [](GgufWriter& w) { w.set("deepseek2.rope.scaling.factor", GgufValue::f32(-2)); },
       "rope.scaling.factor is -2"},
      {"negative", [](GgufWriter& w) { w.set("deepseek2.block_count", GgufValue::i32(-1)); },
       "key 'deepseek2.block_count' is -1, expected a value >= 0"},
      {"old file without tensors", [](GgufWriter& w) { w.remove("deepseek2.attention.key_length_mla"); },
       "no attention.key_length_mla key and no usable blk.0 query tensor"},
  };
  for (const auto& bc : cases) {
    std::string msg = error_of(bc.edit);
    EXPECT_NE(msg.find(bc.message), std::string::npos) << bc.what << ": " << msg;
    EXPECT_NE(msg.find("toy.gguf"), std::string::npos) << bc.what << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << bc.what;
  }
}

TEST(DeepseekConfig, OlderFileDimsComeFromTensorShapes) {
  // Before the *_mla keys: head_count_kv = head_count, key/value_length per decompressed head,
  // fused attn_kv_b. The dims come from attn_q and attn_kv_b.
  GgufWriter w = base_keys();
  w.remove("deepseek2.attention.key_length_mla");
  w.remove("deepseek2.attention.value_length_mla");
  w.set("deepseek2.attention.head_count_kv", GgufValue::u32(4));
  w.set("deepseek2.attention.key_length", GgufValue::u32(64));
  w.set("deepseek2.attention.value_length", GgufValue::u32(48));
  w.add_tensor("blk.0.attn_q.weight", GgmlType::F32, {128, 4 * 64}, std::vector<uint8_t>(128 * 256 * 4));
  w.add_tensor("blk.0.attn_kv_b.weight", GgmlType::F32, {96, 4 * (32 + 48)}, std::vector<uint8_t>(96 * 320 * 4));
  DeepseekConfig c = load(w);
  EXPECT_FALSE(c.has_mla_keys);
  EXPECT_EQ(c.qk_head, 64);
  EXPECT_EQ(c.qk_nope, 32);
  EXPECT_EQ(c.v_head, 48);
}

}  // namespace
}  // namespace mla
