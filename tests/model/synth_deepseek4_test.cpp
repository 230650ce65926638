// `mla gguf synth --arch deepseek4`: the written file loads through the deepseek4 loader (every key
// of docs/DEEPSEEK-V4.md §2 and tensor of §3 that the schedule needs, shapes and types checked
// there), carries the spec's schedule, hash table and types, and runs; bad specs are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "gguf/gguf.h"
#include "model/deepseek4.h"
#include "model/synth.h"
#include "model_test_util.h"
#include "util/error.h"

namespace mla {
namespace {

SynthSpec tiny_spec() {
  SynthSpec s;
  s.arch = "deepseek4";
  s.n_layer = 4, s.n_embd = 64, s.n_head = 4, s.head_dim = 32, s.qk_rope = 8, s.q_lora_rank = 32;
  s.o_groups = 2, s.o_lora_rank = 16, s.n_window = 8, s.compress_ratios = "4,128,0,4", s.n_hash_layers = 2;
  s.n_expert = 8, s.n_expert_used = 3, s.n_ff_exp = 32, s.n_vocab = 300;
  s.n_indexer_head = 2, s.indexer_head_dim = 16, s.indexer_top_k = 3;
  s.rope_scaling = "yarn", s.rope_factor = 4, s.rope_orig_ctx = 256;
  s.role_types["ffn_exps"] = GgmlType::MXFP4;
  return s;
}

TEST(SynthDeepseek4, WritesALoadableFileWithTheSpecsSchedule) {
  const SynthSpec s = tiny_spec();
  const std::string path = testing::temp_dir() + "/synth-ds4.gguf";
  write_synth_deepseek2(s, path);  // dispatches on arch
  auto b = load_deepseek4(path);
  const Deepseek4Config& c = b->config;
  EXPECT_EQ(c.n_layer, 4);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.n_rot, 8);
  EXPECT_EQ(c.n_window, 8);
  EXPECT_EQ(c.n_hash_layers, 2);
  EXPECT_EQ(c.n_vocab, 300);
  EXPECT_EQ(c.compress_ratio, (std::vector<int64_t>{4, 128, 0, 4}));
  EXPECT_NE(c.rope_compress.ext_factor, 0.0f);  // YaRN on the compressed layers only
  EXPECT_EQ(c.rope_main.ext_factor, 0.0f);
  EXPECT_EQ(b->file->require_tensor("blk.0.ffn_gate_exps.weight").type, GgmlType::MXFP4);
  EXPECT_EQ(b->file->require_tensor("blk.0.attn_q_a.weight").type, GgmlType::F32);
  EXPECT_EQ(b->file->find_tensor("blk.2.attn_compressor_kv.weight"), nullptr);  // sliding layer
  EXPECT_EQ(b->file->find_tensor("blk.1.indexer.proj.weight"), nullptr);        // HCA: no indexer
  for (int64_t il = 0; il < 2; ++il) {  // hash layers: k distinct experts per token id
    const std::vector<int32_t>& t = b->weights.layers[il].tid2eid;
    ASSERT_EQ(t.size(), 300u * 3);
    for (size_t tok = 0; tok < 300; ++tok)
      EXPECT_EQ(std::set<int32_t>(t.begin() + tok * 3, t.begin() + tok * 3 + 3).size(), 3u) << "token " << tok;
  }
  EXPECT_TRUE(b->weights.layers[2].tid2eid.empty());
  Deepseek4Model m(c, b->weights, 2);
  std::vector<int32_t> tokens(20);
  for (int i = 0; i < 20; ++i) tokens[i] = (i * 37) % 300;
  std::vector<float> logits(20 * 300);
  m.prefill(tokens, logits.data());
  for (float x : logits) ASSERT_TRUE(std::isfinite(x));
}

TEST(SynthDeepseek4, RefusesBadSpecs) {
  auto refused = [](const std::function<void(SynthSpec&)>& edit, const std::string& want) {
    SynthSpec s = tiny_spec();
    edit(s);
    try {
      write_synth_deepseek2(s, testing::temp_dir() + "/synth-ds4-bad.gguf");
      ADD_FAILURE() << "accepted: " << want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  refused([](SynthSpec& s) { s.compress_ratios = "4,5,0,4"; }, "compress_ratios entry '5'");
  refused([](SynthSpec& s) { s.compress_ratios = "4,128"; }, "expected one per layer (4)");
  refused([](SynthSpec& s) { s.n_hash_layers = 5; }, "n_hash_layers");
  refused([](SynthSpec& s) { s.o_groups = 3; }, "o_groups 3");
  refused([](SynthSpec& s) { s.rope_scaling = "linear"; }, "rope_scaling 'linear'");
}

}  // namespace
}  // namespace mla
