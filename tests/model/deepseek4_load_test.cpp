// DeepSeek-V4 (`deepseek4`): the config and weights loader on the committed tiny references, every
// kind of bad file refused at load with the key or tensor named (tools/deepseek4/make_fixtures.py).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/deepseek4_weights.h"
#include "model_test_util.h"
#include "util/error.h"

namespace mla {
namespace {

std::string fixture(const std::string& model, const std::string& file) {
  return std::string(MLA_SOURCE_DIR) + "/tests/fixtures/deepseek4/" + model + "/" + file;
}

TEST(Deepseek4Config, ReadsTheMixedSchedule) {
  auto f = GgufFile::open(fixture("mixed", "model-f32.gguf"));
  Deepseek4Config c = load_deepseek4_config(*f);
  EXPECT_EQ(c.n_layer, 4);
  ASSERT_EQ(c.compress_ratio, (std::vector<int64_t>{0, 4, 128, 4}));
  EXPECT_EQ(c.attn_kind(0), Ds4Attn::Sliding);
  EXPECT_EQ(c.attn_kind(1), Ds4Attn::Csa);
  EXPECT_EQ(c.attn_kind(2), Ds4Attn::Hca);
  EXPECT_TRUE(c.is_hash_layer(1));
  EXPECT_FALSE(c.is_hash_layer(2));
  EXPECT_EQ(c.hc_mix, 24);
  EXPECT_EQ(c.o_group_in, 32);
  EXPECT_EQ(c.rope_compress.ext_factor, 0);
  EXPECT_EQ(c.rope_main.freq_base, 10000);
  EXPECT_EQ(c.rope_compress.freq_base, 160000);
  EXPECT_FLOAT_EQ(c.swiglu_limit[3], 1.5f);
}

// One compress_ratios entry more than block_count with nextn_predict_layers 1 and no MTP block:
// the trunk is every block. The compressed layers get YaRN, the sliding ones would not.
TEST(Deepseek4Config, ReadsTheYarnScheduleWithTheMtpEntry) {
  auto f = GgufFile::open(fixture("yarn", "model-f32.gguf"));
  Deepseek4Config c = load_deepseek4_config(*f);
  EXPECT_EQ(c.n_layer, 3);
  EXPECT_EQ(c.n_nextn, 1);
  EXPECT_EQ(c.compress_ratio, (std::vector<int64_t>{4, 128, 4}));
  EXPECT_EQ(c.rope_compress.ext_factor, 1);
  EXPECT_DOUBLE_EQ(c.rope_compress.freq_scale, 0.25);
  EXPECT_EQ(c.rope_compress.attn_factor, 1);
  EXPECT_EQ(c.rope_main.ext_factor, 0);
  EXPECT_EQ(c.hc_sinkhorn_iters, 7);
}

// The mixed fixture rewritten by `keys` and `tensor` (return false to drop one); the load error.
std::string load_error(const std::function<void(GgufWriter&)>& keys,
                       const std::function<bool(const std::string&, testing::TensorEdit&)>& tensor = nullptr) {
  static int n = 0;
  const std::string path = testing::temp_dir() + "/ds4-bad-" + std::to_string(n++) + ".gguf";
  testing::rewrite_gguf(
      fixture("mixed", "model-f32.gguf"), path,
      [&](const std::string& name, testing::TensorEdit& e) { return tensor ? tensor(name, e) : true; }, keys);
  try {
    load_deepseek4(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<GgufValue> u32s(std::initializer_list<uint32_t> xs) {
  std::vector<GgufValue> v;
  for (uint32_t x : xs) v.push_back(GgufValue::u32(x));
  return v;
}

TEST(Deepseek4Load, RefusesAMissingKeyNamingIt) {
  for (const char* key : {"deepseek4.hyper_connection.sinkhorn_iterations", "deepseek4.attention.compress_ratios",
                          "deepseek4.hash_layer_count", "deepseek4.swiglu_clamp_exp",
                          "deepseek4.attention.output_group_count", "deepseek4.attention.indexer.top_k"}) {
    const std::string err = load_error([&](GgufWriter& w) { w.remove(key); });
    EXPECT_NE(err.find(std::string("missing required key '") + key + "'"), std::string::npos) << key << ": " << err;
  }
}

TEST(Deepseek4Load, RefusesALayerScheduleOfTheWrongLength) {
  for (auto ratios : {u32s({0, 4, 128}), u32s({0, 4, 128, 4, 0})}) {
    const size_t n = ratios.size();
    const std::string err = load_error([&](GgufWriter& w) {
      w.set("deepseek4.attention.compress_ratios", GgufValue::array(GgufValueType::UINT32, ratios));
    });
    EXPECT_NE(err.find("key 'deepseek4.attention.compress_ratios' has " + std::to_string(n) + " entries, expected 4"),
              std::string::npos)
        << err;
  }
  const std::string err = load_error([](GgufWriter& w) {
    w.set("deepseek4.swiglu_clamp_exp", GgufValue::f32s({1.5f, 1.5f}));
  });
  EXPECT_NE(err.find("key 'deepseek4.swiglu_clamp_exp' has 2 entries"), std::string::npos) << err;
}

TEST(Deepseek4Load, RefusesAnUnknownLayerType) {
  const std::string err = load_error([](GgufWriter& w) {
    w.set("deepseek4.attention.compress_ratios", GgufValue::array(GgufValueType::UINT32, u32s({0, 4, 8, 4})));
  });
  EXPECT_NE(err.find("key 'deepseek4.attention.compress_ratios' entry 2 is 8: unknown layer type"), std::string::npos)
      << err;
}

TEST(Deepseek4Load, RefusesAnUnknownScoringFunction) {
  for (uint32_t func : {1u, 2u, 0u}) {
    const std::string err =
        load_error([&](GgufWriter& w) { w.set("deepseek4.expert_gating_func", GgufValue::u32(func)); });
    EXPECT_NE(err.find("key 'deepseek4.expert_gating_func' is " + std::to_string(func) + ": unknown scoring function"),
              std::string::npos)
        << err;
  }
}

TEST(Deepseek4Load, RefusesAMissingTensorTheScheduleNeeds) {
  for (const char* name :
       {"blk.1.indexer_compressor_ape.weight", "blk.2.attn_compressor_kv.weight", "blk.0.ffn_gate_tid2eid.weight",
        "blk.3.exp_probs_b.bias", "blk.2.hc_ffn_scale.weight", "output_hc_fn.weight", "blk.3.attn_sinks.weight"}) {
    const std::string err = load_error(nullptr, [&](const std::string& t, testing::TensorEdit&) { return t != name; });
    EXPECT_NE(err.find(std::string("missing tensor '") + name + "'"), std::string::npos) << name << ": " << err;
  }
  // Layer 0 declared CSA: its compressor and indexer are now needed and absent.
  const std::string err = load_error([](GgufWriter& w) {
    w.set("deepseek4.attention.compress_ratios", GgufValue::array(GgufValueType::UINT32, u32s({4, 4, 128, 4})));
  });
  EXPECT_NE(err.find("missing tensor 'blk.0.attn_compressor_kv.weight'"), std::string::npos) << err;
}

TEST(Deepseek4Load, RefusesBadShapesAndExpertIds) {
  std::string err = load_error(nullptr, [](const std::string& t, testing::TensorEdit& e) {
    if (t == "blk.1.attn_compressor_ape.weight") e.ne = {64, 2}, e.data.resize(64 * 2 * 4);
    return true;
  });
  EXPECT_NE(err.find("tensor 'blk.1.attn_compressor_ape.weight': expected shape {64, 4}, got {64, 2}"),
            std::string::npos)
      << err;
  err = load_error(nullptr, [](const std::string& t, testing::TensorEdit& e) {
    if (t == "blk.1.ffn_gate_tid2eid.weight") reinterpret_cast<int32_t*>(e.data.data())[5] = 6;
    return true;
  });
  EXPECT_NE(err.find("tensor 'blk.1.ffn_gate_tid2eid.weight' holds expert id 6 (token 2), expected 0..5"),
            std::string::npos)
      << err;
}

}  // namespace
}  // namespace mla
