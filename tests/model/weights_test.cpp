// Tensor binding: every tensor checked by name, type and shape with expected vs actual in the
// message; both MLA layouts derive the same F32 W_UK / W_UV.
#include <gtest/gtest.h>

#include "model/weights.h"
#include "model_test_util.h"
#include "util/error.h"

namespace mla {
namespace {

using testing::rewrite_gguf;
using testing::small_spec;
using testing::synth_file;
using testing::temp_dir;
using testing::TensorEdit;

std::string bind_error(const std::string& path) {
  auto f = GgufFile::open(path);
  try {
    DeepseekConfig c = load_deepseek_config(*f);
    bind_deepseek_weights(*f, c);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(DeepseekWeights, BindsSynthModel) {
  std::string path = synth_file("weights_ok", small_spec());
  auto f = GgufFile::open(path);
  DeepseekConfig c = load_deepseek_config(*f);
  DeepseekWeights w = bind_deepseek_weights(*f, c);
  ASSERT_EQ(w.layers.size(), 2u);
  EXPECT_EQ(w.layout, MlaLayout::Split);
  EXPECT_FALSE(w.output_tied);
  EXPECT_FALSE(w.layers[0].is_moe);
  EXPECT_TRUE(w.layers[1].is_moe);
  EXPECT_EQ(w.layers[1].ffn_gate_exps.n_rows, 8 * 32);
  EXPECT_EQ(w.layers[1].exp_probs_b.size(), 8u);
  EXPECT_EQ(w.layers[0].w_uk.size(), static_cast<size_t>(4 * 32 * 16));
  EXPECT_EQ(w.layers[0].w_uk_t.size(), static_cast<size_t>(4 * 16 * 32));
  EXPECT_EQ(w.layers[0].w_uv.size(), static_cast<size_t>(4 * 16 * 32));
  // Only the forms a path policy needs.
  DeepseekWeights mqa_only = bind_deepseek_weights(*f, c, weight_options_for(MlaPathPolicy::Mqa, false));
  EXPECT_TRUE(mqa_only.layers[0].w_uk_t.empty());
  EXPECT_FALSE(mqa_only.layers[0].w_uk.empty());
}

TEST(DeepseekWeights, FusedAndSplitLayoutsDeriveTheSameProjections) {
  SynthSpec s = small_spec();
  std::string split = synth_file("weights_split", s);
  s.layout = MlaLayout::Fused;
  std::string fused = synth_file("weights_fused", s);
  auto fs = GgufFile::open(split), ff = GgufFile::open(fused);
  DeepseekConfig cs = load_deepseek_config(*fs), cf = load_deepseek_config(*ff);
  DeepseekWeights ws = bind_deepseek_weights(*fs, cs), wf = bind_deepseek_weights(*ff, cf);
  EXPECT_EQ(wf.layout, MlaLayout::Fused);
  for (size_t il = 0; il < ws.layers.size(); ++il) {
    EXPECT_EQ(ws.layers[il].w_uk, wf.layers[il].w_uk);
    EXPECT_EQ(ws.layers[il].w_uk_t, wf.layers[il].w_uk_t);
    EXPECT_EQ(ws.layers[il].w_uv, wf.layers[il].w_uv);
  }
}

TEST(DeepseekWeights, TiedOutputUsesEmbedding) {
  SynthSpec s = small_spec();
  s.tied_output = true;
  auto f = GgufFile::open(synth_file("weights_tied", s));
  DeepseekConfig c = load_deepseek_config(*f);
  DeepseekWeights w = bind_deepseek_weights(*f, c);
  EXPECT_TRUE(w.output_tied);
  EXPECT_EQ(w.output.data, w.token_embd.data);
}

TEST(DeepseekWeights, WrongShapeNamesTensorExpectedAndActual) {
  std::string path = temp_dir() + "/bad_shape.gguf";
  rewrite_gguf(synth_file("weights_ok", small_spec()), path, [](const std::string& n, TensorEdit& e) {
    if (n == "blk.1.attn_q_b.weight") {
      e.ne = {32, 64};
      e.data.resize(32 * 64 * 4);
    }
    return true;
  });
  std::string msg = bind_error(path);
  EXPECT_NE(msg.find("tensor 'blk.1.attn_q_b.weight': expected shape {32, 96}, got {32, 64}"), std::string::npos)
      << msg;
}

TEST(DeepseekWeights, WrongExpertShapeNamesTensor) {
  std::string path = temp_dir() + "/bad_experts.gguf";
  rewrite_gguf(synth_file("weights_ok", small_spec()), path, [](const std::string& n, TensorEdit& e) {
    if (n == "blk.1.ffn_down_exps.weight") e.ne = {32, 64, 4}, e.data.resize(32 * 64 * 4 * 4);
    return true;
  });
  std::string msg = bind_error(path);
  EXPECT_NE(msg.find("tensor 'blk.1.ffn_down_exps.weight': expected shape {32, 64, 8}, got {32, 64, 4}"),
            std::string::npos)
      << msg;
}

TEST(DeepseekWeights, MissingTensorIsNamed) {
  std::string path = temp_dir() + "/missing.gguf";
  rewrite_gguf(synth_file("weights_ok", small_spec()), path,
               [](const std::string& n, TensorEdit&) { return n != "blk.0.ffn_norm.weight"; });
  std::string msg = bind_error(path);
  EXPECT_NE(msg.find("missing tensor 'blk.0.ffn_norm.weight' (expected shape {64})"), std::string::npos) << msg;
}

TEST(DeepseekWeights, MissingMlaProjectionsAreNamed) {
  std::string path = temp_dir() + "/no_mla.gguf";
  rewrite_gguf(synth_file("weights_ok", small_spec()), path, [](const std::string& n, TensorEdit&) {
    return n != "blk.0.attn_k_b.weight" && n != "blk.0.attn_v_b.weight";
  });
  std::string msg = bind_error(path);
  EXPECT_NE(msg.find("missing tensor 'blk.0.attn_kv_b.weight' (expected shape {32, 128})"), std::string::npos) << msg;
}

TEST(DeepseekWeights, UnsupportedTypeIsNamed) {
  std::string path = temp_dir() + "/bad_type.gguf";
  rewrite_gguf(synth_file("weights_ok", small_spec()), path, [](const std::string& n, TensorEdit& e) {
    if (n == "blk.0.attn_output.weight") e.type = GgmlType::I32;  // same byte size as F32
    return true;
  });
  std::string msg = bind_error(path);
  EXPECT_NE(msg.find("tensor 'blk.0.attn_output.weight' has type I32"), std::string::npos) << msg;
}

}  // namespace
}  // namespace mla
