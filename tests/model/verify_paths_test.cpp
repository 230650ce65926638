// ModelOptions::verify_paths: every forward call is rerun end to end with each sequence down the
// other MLA path. The primary run must not see it (its logits, hence the cache rows later steps
// read, bit for bit those of a run without verification), and at step 0 (the prompt over an empty
// cache) the rerun is exactly the forced other-path run, so the reported logits difference is
// that of two independent forced runs. Dense and DSA (indexer keys saved and restored too).
#include <gtest/gtest.h>

#include <cstring>

#include "model_test_util.h"

namespace mla {
namespace {

using testing::synth_file;

struct Run {
  std::vector<float> logits;  // every prompt row, then one row per decode step
  PathVerifyLog verify;
  int64_t prompt_mha = 0;  // the prompt's tokens the model sent down MHA (its first forward call)
};

// The prompt in one call, then n_decode steps fed fixed tokens (so runs stay comparable).
Run run(const Deepseek2Bundle& b, MlaPathPolicy policy, bool verify, const std::vector<int32_t>& prompt, int n_decode,
        bool exact) {
  ModelOptions o;
  o.exact_attention = exact;
  o.n_threads = 2;
  o.max_batch_tokens = 32;
  o.verify_paths = verify;
  Deepseek2Model m(b.config, b.weights, o);
  LatentCache cache = m.make_cache(static_cast<int64_t>(prompt.size()) + n_decode);
  const int64_t V = b.config.n_vocab;
  Run r;
  r.logits.resize(prompt.size() * V);
  m.forward(single_sequence_batch(prompt, 0, true, policy), cache, r.logits.data());
  r.prompt_mha = m.path_counters().tokens_mha;
  auto n_past = static_cast<int32_t>(prompt.size());
  std::vector<float> row(V);
  for (int i = 0; i < n_decode; ++i) {
    m.forward(single_sequence_batch({(7 * i + 3) % static_cast<int32_t>(V)}, n_past++, true, policy), cache,
              row.data());
    r.logits.insert(r.logits.end(), row.begin(), row.end());
  }
  r.verify = m.verify_log();
  return r;
}

// With the F32 attention kernels (exact false) the paths round differently, so the rerun has a
// difference to report; with the exact ones (the default) it must report none.
void check(const std::string& path, bool exact) {
  auto b = load_deepseek2(path, {});
  const int64_t V = b->config.n_vocab;
  std::vector<int32_t> prompt;
  for (int i = 0; i < 12; ++i) prompt.push_back((i * 37 + 5) % static_cast<int32_t>(V));
  const int n = static_cast<int>(prompt.size()), n_decode = 3;
  const Run mha = run(*b, MlaPathPolicy::Mha, false, prompt, n_decode, exact);
  const Run mqa = run(*b, MlaPathPolicy::Mqa, false, prompt, n_decode, exact);
  for (MlaPathPolicy policy : {MlaPathPolicy::Mha, MlaPathPolicy::Mqa, MlaPathPolicy::Auto}) {
    const std::string what = path + " " + std::string(mla_path_policy_name(policy)) + (exact ? " exact" : " f32");
    const Run plain = run(*b, policy, false, prompt, n_decode, exact);
    const Run ver = run(*b, policy, true, prompt, n_decode, exact);
    ASSERT_EQ(0, std::memcmp(plain.logits.data(), ver.logits.data(), sizeof(float) * plain.logits.size())) << what;
    ASSERT_EQ(ver.verify.steps.size(), 1u + n_decode) << what;
    EXPECT_EQ(ver.verify.steps[0].n_tokens, n) << what;
    ASSERT_EQ(ver.verify.layer_rel.size(), static_cast<size_t>(b->config.n_layer));
    // The prompt went down one path (auto: the model's choice); the rerun is the other one forced.
    ASSERT_TRUE(ver.prompt_mha == 0 || ver.prompt_mha == n) << what;
    const Run& primary = ver.prompt_mha == n ? mha : mqa;
    const Run& other = ver.prompt_mha == n ? mqa : mha;
    double want = 0;
    for (int i = 0; i < n; ++i)
      want = std::max(want, path_rel_diff(primary.logits.data() + i * V, other.logits.data() + i * V, V));
    EXPECT_EQ(ver.verify.steps[0].logits_rel, want) << what;
    if (exact) {
      EXPECT_EQ(want, 0) << what;
      EXPECT_EQ(ver.verify.steps[0].worst_layer_rel, 0) << what;
    } else {
      EXPECT_GT(ver.verify.steps[0].worst_layer_rel, 0) << what;  // the paths round differently
    }
  }
}

TEST(VerifyPaths, RerunsTheOtherPathEndToEndAndLeavesThePrimaryUntouched) {
  SynthSpec dense;  // the default synth widths, every matrix Q8_0
  dense.type = GgmlType::Q8_0;
  dense.seed = 31;
  for (bool exact : {false, true}) check(synth_file("verify_dense_q8", dense), exact);
}

TEST(VerifyPaths, SparseLayersRestoreTheIndexerKeysToo) {
  SynthSpec s = testing::small_spec();
  s.arch = "glm-dsa";
  s.n_layer = 3;
  s.n_indexer_head = 4;
  s.indexer_head_dim = 16;
  s.indexer_top_k = 6;  // the 12-token prompt and the decodes select: the sparse path runs
  s.seed = 21;
  for (bool exact : {false, true}) check(synth_file("verify_dsa", s), exact);
}

}  // namespace
}  // namespace mla
