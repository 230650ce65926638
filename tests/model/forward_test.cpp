// The deepseek2 forward on synth models: the two MLA paths agree with Q8_0 and Q4_K weights (bit
// for bit, with the exact attention kernels); fused and split layouts give identical logits; results are
// bit-identical whatever else is in the batch, however the prompt is chunked and whatever the
// thread count; the variants (lite, merged gate_up, softmax + groups, yarn, older files) load.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "model_test_util.h"
#include "util/error.h"

namespace mla {
namespace {

using testing::max_rel_diff;
using testing::run_logits;
using testing::synth_file;
using testing::temp_dir;

const std::vector<int32_t> kPrompt = {1, 17, 300, 45, 2, 99, 511, 7, 64, 250, 3, 128};

SynthSpec quant_spec(GgmlType t) {
  SynthSpec s;
  s.type = t;
  s.seed = 7;
  s.rope_scaling = "yarn";
  s.rope_factor = 4;
  s.n_ctx_train = 4096;
  s.rope_orig_ctx = 1024;
  s.n_expert_groups = 2;
  s.n_expert_groups_used = 1;
  return s;
}

void expect_finite(const std::vector<float>& v) {
  for (float x : v) ASSERT_TRUE(std::isfinite(x));
}

void expect_paths_agree(const std::string& path) {
  auto mha = run_logits(path, MlaPathPolicy::Mha, kPrompt, 4);
  auto mqa = run_logits(path, MlaPathPolicy::Mqa, kPrompt, 4);
  expect_finite(mha);
  EXPECT_LE(max_rel_diff(mqa, mha), 1e-5);
  // The logits are not degenerate: they spread over several units.
  float lo = mha[0], hi = mha[0];
  for (int64_t v = 0; v < 512; ++v) lo = std::min(lo, mha[v]), hi = std::max(hi, mha[v]);
  EXPECT_GT(hi - lo, 2.0f);
}

TEST(Deepseek2Forward, MhaAndMqaAgreeQ8_0) { expect_paths_agree(synth_file("fwd_q8_0", quant_spec(GgmlType::Q8_0))); }

TEST(Deepseek2Forward, MhaAndMqaAgreeQ4_K) { expect_paths_agree(synth_file("fwd_q4_k", quant_spec(GgmlType::Q4_K))); }

// At widths where the F32 kernels' last-bit difference between the paths flips a Q8_K or Q8_0
// rounding of the next matmul's activations (hidden 512, 16 heads of v 64, 3 layers: with them,
// mqa and mha part by ~1e-2 on the Q4_K file), the exact kernels give both paths the same bits at
// every prompt position and decode step. This binary is also built for the AVX2 and scalar kernel
// families (tests/CMakeLists.txt), so each family is held to it.
TEST(Deepseek2Forward, PathsGiveTheSameBitsWhereF32KernelsPart) {
  std::vector<int32_t> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 37 + 5) % 512);
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q8_0}) {
    SynthSpec s = quant_spec(t);
    s.n_embd = 512, s.n_head = 16, s.v_head = 64, s.qk_nope = 64, s.kv_lora_rank = 256, s.n_layer = 3;
    const std::string path = synth_file("fwd_wide_" + std::string(ggml_type_name(t)), s);
    const auto mha = run_logits(path, MlaPathPolicy::Mha, prompt, 6);
    const auto mqa = run_logits(path, MlaPathPolicy::Mqa, prompt, 6);
    expect_finite(mha);
    EXPECT_EQ(mha, mqa) << ggml_type_name(t) << ": largest difference " << max_rel_diff(mqa, mha);
  }
}

TEST(Deepseek2Forward, FusedCopyGivesIdenticalLogits) {
  std::string split = synth_file("fwd_q8_0", quant_spec(GgmlType::Q8_0));
  std::string fused = temp_dir() + "/fwd_q8_0_fused.gguf";
  convert_mla_layout(split, fused, MlaLayout::Fused);
  std::string back = temp_dir() + "/fwd_q8_0_split_again.gguf";
  convert_mla_layout(fused, back, MlaLayout::Split);
  for (MlaPathPolicy p : {MlaPathPolicy::Mha, MlaPathPolicy::Mqa}) {
    auto a = run_logits(split, p, kPrompt, 3);
    EXPECT_EQ(a, run_logits(fused, p, kPrompt, 3));
    EXPECT_EQ(a, run_logits(back, p, kPrompt, 3));
  }
}

TEST(Deepseek2Forward, LayoutConversionCoversTheMtpBlock) {
  // A file with an MTP (nextn) block: every block, the MTP one too, changes layout, and the trunk's
  // logits do not change.
  SynthSpec s = quant_spec(GgmlType::Q8_0);
  s.n_nextn = 1;
  std::string split = synth_file("fwd_q8_0_nextn", s);
  std::string fused = temp_dir() + "/fwd_q8_0_nextn_fused.gguf";
  convert_mla_layout(split, fused, MlaLayout::Fused);
  std::string back = temp_dir() + "/fwd_q8_0_nextn_split_again.gguf";
  convert_mla_layout(fused, back, MlaLayout::Split);
  const std::string mtp = "blk." + std::to_string(s.n_layer) + ".";
  auto f = GgufFile::open(fused);
  EXPECT_NE(f->find_tensor(mtp + "attn_kv_b.weight"), nullptr);
  EXPECT_EQ(f->find_tensor(mtp + "attn_k_b.weight"), nullptr);
  EXPECT_NE(f->find_tensor(mtp + "nextn.eh_proj.weight"), nullptr);
  EXPECT_NE(GgufFile::open(back)->find_tensor(mtp + "attn_k_b.weight"), nullptr);
  for (MlaPathPolicy p : {MlaPathPolicy::Mha, MlaPathPolicy::Mqa}) {
    auto a = run_logits(split, p, kPrompt, 3);
    EXPECT_EQ(a, run_logits(fused, p, kPrompt, 3));
    EXPECT_EQ(a, run_logits(back, p, kPrompt, 3));
  }
}

TEST(Deepseek2Forward, SynthFusedAndSplitF32AreIdentical) {
  SynthSpec s;
  s.seed = 11;
  std::string split = synth_file("fwd_f32_split", s);
  s.layout = MlaLayout::Fused;
  std::string fused = synth_file("fwd_f32_fused", s);
  EXPECT_EQ(run_logits(split, MlaPathPolicy::Auto, kPrompt, 3), run_logits(fused, MlaPathPolicy::Auto, kPrompt, 3));
}

TEST(Deepseek2Forward, BatchChunkingAndThreadsDoNotChangeBits) {
  std::string path = synth_file("fwd_q8_0", quant_spec(GgmlType::Q8_0));
  auto b = load_deepseek2(path, {});
  const int64_t V = b->config.n_vocab;
  for (MlaPathPolicy policy : {MlaPathPolicy::Mha, MlaPathPolicy::Mqa}) {
    // Sequence A alone, prompt in one call.
    std::vector<float> alone(kPrompt.size() * V);
    {
      ModelOptions o;
      o.n_threads = 1;
      Deepseek2Model m(b->config, b->weights, o);
      LatentCache cache = m.make_cache(32);
      m.forward(single_sequence_batch(kPrompt, 0, true, policy), cache, alone.data());
    }
    // Sequence A in two chunks, next to sequence B, 3 threads, scattered slots.
    ModelOptions o;
    o.n_threads = 3;
    Deepseek2Model m(b->config, b->weights, o);
    LatentCache cache = m.make_cache(64);
    const std::vector<int32_t> other = {5, 6, 7, 8, 9};
    std::vector<int32_t> a_slots;
    for (int i = 0; i < 12; ++i) a_slots.push_back(40 - 3 * i);
    std::vector<float> got(kPrompt.size() * V);
    auto two_seq_batch = [&](size_t a_begin, size_t a_end, int b_len) {
      BatchMeta bm;
      SeqMeta sb{.query_start = 0, .query_len = b_len, .context_len = b_len, .slots_start = 0};
      for (int i = 0; i < b_len; ++i) {
        bm.token_ids.push_back(other[i]);
        bm.positions.push_back(i);
        bm.slot_mapping.push_back(50 + i);
        bm.context_slots.push_back(50 + i);
      }
      SeqMeta sa{.query_start = b_len,
                 .query_len = static_cast<int32_t>(a_end - a_begin),
                 .context_len = static_cast<int32_t>(a_end),
                 .slots_start = b_len};
      for (size_t i = a_begin; i < a_end; ++i) {
        bm.token_ids.push_back(kPrompt[i]);
        bm.positions.push_back(static_cast<int32_t>(i));
        bm.slot_mapping.push_back(a_slots[i]);
      }
      for (size_t j = 0; j < a_end; ++j) bm.context_slots.push_back(a_slots[j]);
      bm.seqs = {sb, sa};
      for (size_t i = 0; i < a_end - a_begin; ++i) bm.logits_rows.push_back(static_cast<int32_t>(b_len + i));
      bm.policy = policy;
      return bm;
    };
    m.forward(two_seq_batch(0, 7, 5), cache, got.data());
    std::vector<float> tail(5 * V);
    // Second chunk: B is not in the batch any more (its cache rows stay).
    BatchMeta second = single_sequence_batch({kPrompt.begin() + 7, kPrompt.end()}, 7, true, policy);
    second.slot_mapping.assign(a_slots.begin() + 7, a_slots.end());
    second.context_slots = a_slots;
    m.forward(second, cache, tail.data());
    std::copy(tail.begin(), tail.end(), got.begin() + 7 * V);
    EXPECT_EQ(0, std::memcmp(got.data(), alone.data(), sizeof(float) * got.size()))
        << "policy " << mla_path_policy_name(policy);
  }
}

// A dense FFN wider than the MoE's buffers runs its tokens in chunks (swiglu_ffn): a 300-token
// prefill (the dense layer in 256 + 44 rows) gives the bits of the same prompt in 100-token calls.
TEST(Deepseek2Forward, DenseFfnChunksDoNotChangeBits) {
  SynthSpec s = testing::small_spec();
  s.n_ff = 1024;  // 256 rows of it take more than the MoE's 300 pairs x 2 * n_ff_exp
  s.type = GgmlType::Q8_0;
  auto b = load_deepseek2(synth_file("fwd_wide_ffn", s), {});
  const int64_t V = b->config.n_vocab, n = 300;
  std::vector<int32_t> prompt(n);
  for (int64_t i = 0; i < n; ++i) prompt[i] = static_cast<int32_t>((i * 7 + 3) % V);
  auto run = [&](int64_t chunk) {
    ModelOptions o;
    o.n_threads = 2;
    o.max_batch_tokens = chunk;
    Deepseek2Model m(b->config, b->weights, o);
    LatentCache cache = m.make_cache(n);
    std::vector<float> logits(n * V);
    for (int64_t p0 = 0; p0 < n; p0 += chunk) {
      const std::vector<int32_t> piece(prompt.begin() + p0, prompt.begin() + std::min(n, p0 + chunk));
      m.forward(single_sequence_batch(piece, static_cast<int32_t>(p0), true, MlaPathPolicy::Mha), cache,
                logits.data() + p0 * V);
    }
    return logits;
  };
  const std::vector<float> whole = run(n), pieces = run(100);
  EXPECT_EQ(0, std::memcmp(whole.data(), pieces.data(), sizeof(float) * whole.size()));
}

TEST(Deepseek2Forward, VariantsRunAndAgreeAcrossPaths) {
  struct Variant {
    const char* name;
    SynthSpec spec;
  };
  std::vector<Variant> vs;
  {
    SynthSpec s;
    s.q_lora_rank = 0;  // lite: attn_q
    s.gating = "softmax";
    s.weights_norm = false;
    s.weights_scale = 1;
    s.exp_probs_b = false;
    s.n_expert_shared = 2;
    s.rope_scaling = "yarn";
    s.rope_factor = 40;
    s.yarn_mscale_all_dim = 0.707;
    s.type = GgmlType::Q8_0;
    vs.push_back({"fwd_lite_softmax", s});
  }
  {
    SynthSpec s;
    s.merged_gate_up = true;
    s.n_expert = 16;
    s.n_expert_used = 4;
    s.n_expert_groups = 4;
    s.n_expert_groups_used = 2;
    s.n_layer = 3;
    s.tied_output = true;
    vs.push_back({"fwd_merged_groups", s});
  }
  {
    SynthSpec s;
    s.mla_keys = false;  // an older file: fused attn_kv_b, head_count_kv = n_head, no *_mla keys
    s.layout = MlaLayout::Fused;
    s.rope_scaling = "linear";
    s.n_layer_dense_lead = 0;
    vs.push_back({"fwd_old_file", s});
  }
  for (const auto& v : vs) {
    SCOPED_TRACE(v.name);
    expect_paths_agree(synth_file(v.name, v.spec));
  }
}

TEST(Deepseek2Forward, MergedGateUpEqualsSeparate) {
  SynthSpec s;
  s.seed = 21;
  std::string sep = synth_file("fwd_sep", s);
  s.merged_gate_up = true;
  std::string merged = synth_file("fwd_merged", s);
  EXPECT_EQ(run_logits(sep, MlaPathPolicy::Auto, kPrompt, 2), run_logits(merged, MlaPathPolicy::Auto, kPrompt, 2));
}

TEST(Deepseek2Forward, OldFileEqualsMlaFile) {
  SynthSpec s;
  s.seed = 31;
  std::string mla_file = synth_file("fwd_new_keys", s);
  s.mla_keys = false;
  s.layout = MlaLayout::Fused;
  std::string old_file = synth_file("fwd_old_keys", s);
  EXPECT_EQ(run_logits(mla_file, MlaPathPolicy::Auto, kPrompt, 2),
            run_logits(old_file, MlaPathPolicy::Auto, kPrompt, 2));
}

TEST(Deepseek2Forward, BadBatchesAreRejected) {
  std::string path = synth_file("fwd_q8_0", quant_spec(GgmlType::Q8_0));
  auto b = load_deepseek2(path, {});
  ModelOptions o;
  o.max_batch_tokens = 8;
  Deepseek2Model m(b->config, b->weights, o);
  LatentCache cache = m.make_cache(16);
  std::vector<float> logits(16 * 512);
  auto msg = [&](BatchMeta bm) -> std::string {
    try {
      m.forward(bm, cache, logits.data());
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_NE(msg(single_sequence_batch({1, 2, 3, 4, 5, 6, 7, 8, 9}, 0, true, MlaPathPolicy::Auto))
                .find("exceed max_batch_tokens 8"),
            std::string::npos);
  EXPECT_NE(msg(single_sequence_batch({1, 512}, 0, true, MlaPathPolicy::Auto)).find("token id 512 at row 1 outside"),
            std::string::npos);
  EXPECT_NE(msg(single_sequence_batch({1, 2}, 15, true, MlaPathPolicy::Auto)).find("outside the cache's 16 slots"),
            std::string::npos);
  BatchMeta bad = single_sequence_batch({1, 2}, 0, true, MlaPathPolicy::Auto);
  bad.context_slots[1] = 5;
  EXPECT_NE(msg(bad).find("written to slot 1 but its context position lists slot 5"), std::string::npos);
}

TEST(Deepseek2Forward, ModelLoadedForOnePathRefusesTheOther) {
  std::string path = synth_file("fwd_q8_0", quant_spec(GgmlType::Q8_0));
  auto b = load_deepseek2(path, weight_options_for(MlaPathPolicy::Mqa, false));
  Deepseek2Model m(b->config, b->weights, {});
  LatentCache cache = m.make_cache(8);
  std::vector<float> logits(4 * 512);
  EXPECT_THROW(m.forward(single_sequence_batch({1, 2, 3}, 0, true, MlaPathPolicy::Mha), cache, logits.data()), Error);
  m.forward(single_sequence_batch({1, 2, 3}, 0, true, MlaPathPolicy::Mqa), cache, logits.data());
}

}  // namespace
}  // namespace mla
