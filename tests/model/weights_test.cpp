// Tensor binding: every tensor checked by name, type and shape with expected vs actual in the
// message; both MLA layouts give the same W_UK / W_UV values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>

#include "gguf/gguf.h"
#include "model/expert_cache.h"
#include "model/weights.h"
#include "model_test_util.h"
#include "quant/quant.h"
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

// tiled_experts (files larger than memory, written in minutes): the routed expert tensors are
// rows of a 64-row pool, each a valid quantized row; every other tensor is the same bytes as
// without the option, and the file binds.
TEST(SynthSpec, TiledExpertsAreValidRowsFromAPoolAndTouchNothingElse) {
  SynthSpec plain = small_spec();
  plain.type = GgmlType::Q8_0;
  plain.n_expert = 8;
  plain.n_ff_exp = 256;  // 8 experts x 256 rows: more rows than the pool
  SynthSpec tiled = plain;
  tiled.tiled_experts = true;
  auto fp = GgufFile::open(synth_file("tiled_plain", plain));
  auto ft = GgufFile::open(synth_file("tiled_on", tiled));
  DeepseekConfig c = load_deepseek_config(*ft);
  bind_deepseek_weights(*ft, c);
  int n_routed = 0;
  for (const auto& t : ft->tensors()) {
    const auto& p = fp->require_tensor(t.name);
    ASSERT_EQ(t.n_bytes, p.n_bytes) << t.name;
    if (!is_routed_expert_tensor(t.name)) {
      EXPECT_EQ(std::memcmp(t.data, p.data, t.n_bytes), 0) << t.name;
      continue;
    }
    ++n_routed;
    const size_t rb = ggml_row_bytes(t.type, t.ne[0]);
    std::set<std::string> distinct;
    for (size_t off = 0; off < t.n_bytes; off += rb) {
      std::vector<float> row(static_cast<size_t>(t.ne[0]));
      dequantize_row(t.type, t.data + off, row.data(), t.ne[0]);
      for (float v : row) ASSERT_TRUE(std::isfinite(v)) << t.name;
      distinct.emplace(reinterpret_cast<const char*>(t.data + off), rb);
    }
    EXPECT_LE(distinct.size(), 64u) << t.name;
    EXPECT_GT(distinct.size(), 32u) << t.name;
  }
  EXPECT_EQ(n_routed, 3);  // layer 1's gate, up, down (layer 0 is dense)

  tiled.merged_gate_up = true;
  EXPECT_THROW(write_synth_deepseek2(tiled, temp_dir() + "/tiled_merged.gguf"), Error);
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
  // attn_k_b and attn_v_b are read in place, in the file's type; MHA's W_UK is their F32 transpose.
  const GgufTensorInfo* k_b = f->find_tensor("blk.0.attn_k_b.weight");
  const GgufTensorInfo* v_b = f->find_tensor("blk.0.attn_v_b.weight");
  ASSERT_TRUE(k_b && v_b);
  EXPECT_EQ(w.layers[0].w_uk.data, k_b->data);
  EXPECT_EQ(w.layers[0].w_uk.type, k_b->type);
  EXPECT_EQ(w.layers[0].w_uv.data, v_b->data);
  EXPECT_EQ(w.layers[0].w_uk_t.type, GgmlType::F32);
  ASSERT_EQ(w.layers[0].mla_f32.size(), 1u);
  EXPECT_EQ(w.layers[0].mla_f32[0]->size(), static_cast<size_t>(4 * 16 * 32));
  EXPECT_EQ(w.layers[0].w_uk_t.data, w.layers[0].mla_f32[0]->data());
  // Only the forms a path policy needs.
  DeepseekWeights mqa_only = bind_deepseek_weights(*f, c, weight_options_for(MlaPathPolicy::Mqa, false));
  EXPECT_FALSE(mqa_only.layers[0].w_uk_t);
  EXPECT_TRUE(mqa_only.layers[0].w_uk);
  EXPECT_TRUE(mqa_only.layers[0].mla_f32.empty());
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
  // Every head of each projection as F32 rows.
  auto f32 = [&](const MlaProj& w, int64_t rows, int64_t cols) {
    std::vector<float> out, buf(rows * cols);
    for (int64_t h = 0; h < cs.n_head; ++h) {
      const float* r = mla_proj_head(w, h, rows, cols, buf.data());
      out.insert(out.end(), r, r + rows * cols);
    }
    return out;
  };
  const int64_t R = cs.kv_lora_rank, N = cs.qk_nope, V = cs.v_head;
  for (size_t il = 0; il < ws.layers.size(); ++il) {
    EXPECT_EQ(f32(ws.layers[il].w_uk, R, N), f32(wf.layers[il].w_uk, R, N));
    EXPECT_EQ(f32(ws.layers[il].w_uk_t, N, R), f32(wf.layers[il].w_uk_t, N, R));
    EXPECT_EQ(f32(ws.layers[il].w_uv, V, R), f32(wf.layers[il].w_uv, V, R));
  }
}

TEST(DeepseekWeights, IkConverterFilesReadTheirTwoDimensionalPair) {
  // ik_llama.cpp's converter writes attn_kv_b and a 2-D attn_k_b {N, H * R} / attn_v_b {R, H * V}:
  // the pair is read in place (the same bytes as the 3-D form), attn_kv_b left unread.
  SynthSpec s = small_spec();
  const std::string split = synth_file("weights_split", s);
  s.layout = MlaLayout::Fused;
  s.ik_mla_tensors = true;
  const std::string ik = synth_file("weights_ik", s);
  auto fs = GgufFile::open(split), fi = GgufFile::open(ik);
  const GgufTensorInfo* k_b = fi->find_tensor("blk.0.attn_k_b.weight");
  const GgufTensorInfo* v_b = fi->find_tensor("blk.0.attn_v_b.weight");
  ASSERT_TRUE(k_b && v_b && fi->find_tensor("blk.0.attn_kv_b.weight"));
  EXPECT_EQ(k_b->ne, (std::vector<int64_t>{16, 4 * 32}));
  EXPECT_EQ(v_b->ne, (std::vector<int64_t>{32, 4 * 16}));
  const GgufTensorInfo* k_b3 = fs->find_tensor("blk.0.attn_k_b.weight");
  ASSERT_TRUE(k_b3);
  ASSERT_EQ(k_b->n_bytes, k_b3->n_bytes);
  EXPECT_EQ(std::memcmp(k_b->data, k_b3->data, k_b->n_bytes), 0);
  DeepseekConfig c = load_deepseek_config(*fi);
  DeepseekWeights w = bind_deepseek_weights(*fi, c);
  EXPECT_EQ(w.layout, MlaLayout::Split);
  EXPECT_EQ(w.layers[0].w_uk.data, k_b->data);
  EXPECT_EQ(w.layers[0].w_uv.data, v_b->data);
}

TEST(DeepseekWeights, WrongMlaPairShapeNamesBothForms) {
  std::string path = temp_dir() + "/bad_k_b.gguf";
  rewrite_gguf(synth_file("weights_ok", small_spec()), path, [](const std::string& n, TensorEdit& e) {
    if (n == "blk.0.attn_k_b.weight") e.ne = {16, 64, 2};
    return true;
  });
  std::string msg = bind_error(path);
  EXPECT_NE(msg.find("tensor 'blk.0.attn_k_b.weight': expected shape {16, 32, 4} or {16, 128}, got {16, 64, 2}"),
            std::string::npos)
      << msg;
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
