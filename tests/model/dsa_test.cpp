// deepseek32 / glm-dsa on synth models: DSA equals dense attention while the context fits top_k
// and differs past it; both MLA paths agree under DSA; a sequence's sparse logits do not depend
// on the batch; GLM-5.2-style shared layers, MTP blocks, per-tensor scales and attn_k_b rows of
// 192 in every non-K-quant type load and run; bad indexer keys and tensors are one-line errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "../support/log_capture.h"
#include "model/config.h"
#include "model_test_util.h"
#include "util/error.h"
#include "util/trace.h"

namespace mla {
namespace {

using testing::max_rel_diff;
using testing::rewrite_gguf;
using testing::run_logits;
using testing::synth_file;
using testing::temp_dir;

SynthSpec dsa_spec(const std::string& arch, int64_t top_k = 6) {
  SynthSpec s = testing::small_spec();
  s.arch = arch;
  s.n_layer = 3;
  s.n_indexer_head = 4;
  s.indexer_head_dim = 16;
  s.indexer_top_k = top_k;
  s.seed = arch == "glm-dsa" ? 21 : 22;
  if (arch == "deepseek32") {
    s.rope_scaling = "yarn";
    s.rope_factor = 4;
    s.rope_orig_ctx = 1024;
  }
  return s;
}

std::vector<int32_t> prompt_of(int n) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((i * 37 + 5) % 64);
  return p;
}

TEST(Dsa, EqualsDenseWhileContextFitsTopK) {
  for (const char* arch : {"glm-dsa", "deepseek32"}) {
    // top_k 32 >= the 20 positions: the selection is every row, bit for bit the dense result.
    std::string path = synth_file(std::string("dsa_fit_") + arch, dsa_spec(arch, 32));
    for (MlaPathPolicy p : {MlaPathPolicy::Mha, MlaPathPolicy::Mqa}) {
      auto sparse = run_logits(path, p, prompt_of(16), 4, 2, true);
      auto dense = run_logits(path, p, prompt_of(16), 4, 2, false);
      EXPECT_EQ(sparse, dense) << arch;
    }
  }
}

TEST(Dsa, DiffersFromDensePastTopKAndPathsAgree) {
  for (const char* arch : {"glm-dsa", "deepseek32"}) {
    std::string path = synth_file(std::string("dsa_") + arch, dsa_spec(arch, 6));
    const auto prompt = prompt_of(20);
    auto mha = run_logits(path, MlaPathPolicy::Mha, prompt, 4);
    auto mqa = run_logits(path, MlaPathPolicy::Mqa, prompt, 4);
    auto automatic = run_logits(path, MlaPathPolicy::Auto, prompt, 4);
    EXPECT_LE(max_rel_diff(mqa, mha), 1e-5) << arch;
    EXPECT_LE(max_rel_diff(automatic, mha), 1e-5) << arch;
    auto dense = run_logits(path, MlaPathPolicy::Mha, prompt, 4, 2, false);
    const int64_t V = 64;
    // Positions < top_k see at most top_k rows: the same rows (to rounding: MHA tiles a sparse
    // query alone, a dense one in pairs). Later ones differ.
    for (int64_t i = 0; i < 6 * V; ++i)
      ASSERT_NEAR(mha[i], dense[i], 1e-5f * (1 + std::fabs(dense[i]))) << arch << " row " << i / V;
    auto dense_mqa = run_logits(path, MlaPathPolicy::Mqa, prompt, 4, 2, false);
    for (int64_t i = 0; i < 6 * V; ++i) ASSERT_EQ(mqa[i], dense_mqa[i]) << arch << " row " << i / V;
    double later = 0;
    for (size_t i = 6 * V; i < mha.size(); ++i)
      later = std::max(later, static_cast<double>(std::fabs(mha[i] - dense[i])));
    EXPECT_GT(later, 1e-3) << arch;
  }
}

TEST(Dsa, SequenceIsBatchInvariant) {
  std::string path = synth_file("dsa_glm-dsa", dsa_spec("glm-dsa", 6));
  auto b = load_deepseek2(path, {});
  ModelOptions o;
  o.n_threads = 2;
  o.max_batch_tokens = 64;
  Deepseek2Model m(b->config, b->weights, o);
  const int64_t V = b->config.n_vocab;
  const auto p1 = prompt_of(18);
  std::vector<int32_t> p2 = {3, 9, 27, 17, 51, 25, 11, 33, 1, 2, 8, 60};
  // Alone.
  LatentCache alone = m.make_cache(64);
  std::vector<float> want(p1.size() * V);
  m.forward(single_sequence_batch(p1, 0, true, MlaPathPolicy::Auto), alone, want.data());
  // Next to another sequence, in slots 32.. of the same cache.
  LatentCache both = m.make_cache(64);
  BatchMeta bm;
  bm.policy = MlaPathPolicy::Auto;
  auto add = [&](const std::vector<int32_t>& toks, int32_t slot0) {
    SeqMeta s;
    s.query_start = static_cast<int32_t>(bm.token_ids.size());
    s.query_len = s.context_len = static_cast<int32_t>(toks.size());
    s.slots_start = static_cast<int32_t>(bm.context_slots.size());
    for (size_t i = 0; i < toks.size(); ++i) {
      bm.token_ids.push_back(toks[i]);
      bm.positions.push_back(static_cast<int32_t>(i));
      bm.slot_mapping.push_back(slot0 + static_cast<int32_t>(i));
      bm.context_slots.push_back(slot0 + static_cast<int32_t>(i));
      bm.logits_rows.push_back(static_cast<int32_t>(bm.logits_rows.size()));
    }
    bm.seqs.push_back(s);
  };
  add(p2, 0);
  add(p1, 32);
  std::vector<float> got(bm.token_ids.size() * V);
  m.forward(bm, both, got.data());
  EXPECT_EQ(std::vector<float>(got.begin() + p2.size() * V, got.end()), want);
}

TEST(Dsa, SharedIndexerLayersReuseTheSelection) {
  SynthSpec s = dsa_spec("glm-dsa", 6);
  s.n_layer = 4;
  s.indexer_types = "1001";
  std::string path = synth_file("dsa_shared", s);
  auto b = load_deepseek2(path, {});
  EXPECT_EQ(b->config.indexer_full, (std::vector<bool>{true, false, false, true}));
  EXPECT_TRUE(b->weights.layers[1].idx_k.n_rows == 0);
  const auto prompt = prompt_of(20);
  auto mha = run_logits(path, MlaPathPolicy::Mha, prompt, 3);
  EXPECT_LE(max_rel_diff(run_logits(path, MlaPathPolicy::Mqa, prompt, 3), mha), 1e-5);
  EXPECT_GT(max_rel_diff(run_logits(path, MlaPathPolicy::Mha, prompt, 3, 2, false), mha), 1e-4);
}

TEST(Dsa, MtpBlocksAreCountedOutOfTheTrunkAndLeftUnread) {
  SynthSpec s = dsa_spec("glm-dsa", 6);
  s.n_nextn = 1;
  std::string with_mtp = synth_file("dsa_mtp", s);
  s.n_nextn = 0;
  std::string without = synth_file("dsa_no_mtp", s);
  auto f = GgufFile::open(with_mtp);
  DeepseekConfig c = load_deepseek_config(*f);
  EXPECT_EQ(c.n_layer_all, 4);
  EXPECT_EQ(c.n_nextn, 1);
  EXPECT_EQ(c.n_layer, 3);
  ASSERT_NE(f->find_tensor("blk.3.nextn.eh_proj.weight"), nullptr);
  // Same trunk weights (same seed and names): the MTP block changes nothing.
  EXPECT_EQ(run_logits(with_mtp, MlaPathPolicy::Auto, prompt_of(12), 2),
            run_logits(without, MlaPathPolicy::Auto, prompt_of(12), 2));
}

TEST(Dsa, PerTensorScaleIsApplied) {
  // attn_output halved and a .scale of 2 beside it: the same logits up to rounding.
  std::string path = synth_file("dsa_glm-dsa", dsa_spec("glm-dsa", 6));
  std::string scaled = temp_dir() + "/dsa_scaled.gguf";
  rewrite_gguf(
      path, scaled, [](const std::string&, testing::TensorEdit&) { return true; }, nullptr);
  {
    auto f = GgufFile::open(path);
    GgufWriter w;
    w.copy_metadata_from(*f);
    for (const auto& t : f->tensors()) {
      std::vector<uint8_t> data(t.data, t.data + t.n_bytes);
      if (t.name == "blk.1.attn_output.weight") {
        ASSERT_EQ(t.type, GgmlType::F32);
        auto* v = reinterpret_cast<float*>(data.data());
        for (int64_t i = 0; i < t.n_elements; ++i) v[i] *= 0.5f;
        float two = 2.0f;
        w.add_tensor("blk.1.attn_output.scale", GgmlType::F32, {1}, &two, sizeof two);
      }
      w.add_tensor(t.name, t.type, t.ne, std::move(data));
    }
    w.write(scaled);
  }
  auto a = run_logits(path, MlaPathPolicy::Auto, prompt_of(12), 2);
  auto b = run_logits(scaled, MlaPathPolicy::Auto, prompt_of(12), 2);
  EXPECT_LE(max_rel_diff(b, a), 1e-6);
  // Without the scale the output would be off: the scale is really read.
  std::string unscaled = temp_dir() + "/dsa_unscaled.gguf";
  rewrite_gguf(scaled, unscaled,
               [](const std::string& n, testing::TensorEdit&) { return n != "blk.1.attn_output.scale"; });
  EXPECT_GT(max_rel_diff(run_logits(unscaled, MlaPathPolicy::Auto, prompt_of(12), 2), a), 1e-3);
}

TEST(Dsa, AttnKbRowsOf192InEveryNonKQuantType) {
  SynthSpec base = dsa_spec("glm-dsa", 6);
  base.qk_nope = 192;
  base.kv_lora_rank = 64;
  std::string f32 = synth_file("dsa_kb192_f32", base);
  auto ref = run_logits(f32, MlaPathPolicy::Mqa, prompt_of(10), 2);
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q5_0, GgmlType::Q4_0, GgmlType::F16, GgmlType::BF16}) {
    SynthSpec s = base;
    s.role_types["attn_mla"] = t;
    std::string path = synth_file(std::string("dsa_kb192_") + std::string(ggml_type_name(t)), s);
    auto f = GgufFile::open(path);
    ASSERT_EQ(f->require_tensor("blk.0.attn_k_b.weight").type, t);
    ASSERT_EQ(f->require_tensor("blk.0.attn_k_b.weight").ne[0], 192);
    auto mha = run_logits(path, MlaPathPolicy::Mha, prompt_of(10), 2);
    auto mqa = run_logits(path, MlaPathPolicy::Mqa, prompt_of(10), 2);
    EXPECT_LE(max_rel_diff(mqa, mha), 1e-5) << ggml_type_name(t);
    // Against the F32 file only for the fine types: 4- and 5-bit blocks move a random model's expert
    // routing (their decoding is checked bit for bit against gguf-py in test_gguf_py_roundtrip.py).
    if (t != GgmlType::Q4_0 && t != GgmlType::Q5_0) EXPECT_LE(max_rel_diff(mqa, ref), 0.03) << ggml_type_name(t);
  }
}

TEST(Dsa, TraceCarriesTheSparseDecision) {
  std::string path = synth_file("dsa_glm-dsa", dsa_spec("glm-dsa", 6));
  testing::CaptureLog cap;
  trace_configure("dispatch:2");
  run_logits(path, MlaPathPolicy::Auto, prompt_of(10), 1);
  trace_reset();
  // Prefill of 10: query i selects min(i + 1, 6) rows = 1+2+3+4+5+6*5 = 45; decode: 6.
  EXPECT_NE(
      cap.text().find("dispatch layer=blk.0 is_sparse=1 num_mqa=0 num_mha=1 total_toks=10 index_topk=6 selected=45"),
      std::string::npos)
      << cap.text();
  EXPECT_NE(
      cap.text().find("dispatch layer=blk.2 is_sparse=1 num_mqa=1 num_mha=0 total_toks=1 index_topk=6 selected=6"),
      std::string::npos)
      << cap.text();
}

std::string expect_load_error(const std::string& path) {
  try {
    auto b = load_deepseek2(path, {});
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    return msg;
  }
  ADD_FAILURE() << "loaded " << path;
  return "";
}

TEST(Dsa, BadIndexerKeysAndTensorsAreOneLineErrors) {
  std::string path = synth_file("dsa_glm-dsa", dsa_spec("glm-dsa", 6));
  std::string no_key = temp_dir() + "/dsa_no_key.gguf";
  rewrite_gguf(
      path, no_key, [](const std::string&, testing::TensorEdit&) { return true; },
      [](GgufWriter& w) { w.remove("glm-dsa.attention.indexer.top_k"); });
  EXPECT_NE(expect_load_error(no_key).find("missing required key 'glm-dsa.attention.indexer.top_k'"),
            std::string::npos);

  std::string bad_shape = temp_dir() + "/dsa_bad_shape.gguf";
  rewrite_gguf(path, bad_shape, [](const std::string& n, testing::TensorEdit& e) {
    if (n == "blk.1.indexer.proj.weight") {  // {E, H} -> {E, H - 1}
      e.ne[1] -= 1;
      e.data.resize(e.data.size() / 4 * 3);
    }
    return true;
  });
  std::string msg = expect_load_error(bad_shape);
  EXPECT_NE(msg.find("blk.1.indexer.proj.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected shape {64, 4}"), std::string::npos) << msg;

  std::string missing = temp_dir() + "/dsa_missing_tensor.gguf";
  rewrite_gguf(path, missing,
               [](const std::string& n, testing::TensorEdit&) { return n != "blk.2.indexer.k_norm.bias"; });
  EXPECT_NE(expect_load_error(missing).find("missing tensor 'blk.2.indexer.k_norm.bias'"), std::string::npos);

  std::string other = temp_dir() + "/dsa_other_arch.gguf";
  rewrite_gguf(
      path, other, [](const std::string&, testing::TensorEdit&) { return true; },
      [](GgufWriter& w) { w.set("general.architecture", GgufValue::str("glm4moe")); });
  EXPECT_NE(expect_load_error(other).find("general.architecture is 'glm4moe'"), std::string::npos);
}

TEST(Dsa, CacheCountsIndexerKeys) {
  std::string path = synth_file("dsa_shared_cache", [] {
    SynthSpec s = dsa_spec("glm-dsa", 6);
    s.n_layer = 4;
    s.indexer_types = "1001";
    return s;
  }());
  auto b = load_deepseek2(path, {});
  ModelOptions o;
  Deepseek2Model m(b->config, b->weights, o);
  LatentShape shape = m.latent_shape();
  EXPECT_EQ(shape.index_key_dims, (std::vector<int>{16, 0, 0, 16}));
  // F16: 4 latent rows of (32 + 8) x 2 B and 2 indexer keys of 16 x 2 B.
  EXPECT_EQ(bytes_per_token_all_layers(shape, GgmlType::F16), 4 * 40 * 2 + 2 * 16 * 2);
  o.dsa = false;
  Deepseek2Model dense(b->config, b->weights, o);
  EXPECT_TRUE(dense.latent_shape().index_key_dims.empty());
}

}  // namespace
}  // namespace mla
