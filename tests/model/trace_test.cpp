// The dispatch trace: `--trace dispatch:N` / MLA_TRACE logs each layer's MLA path decision for
// its first N forward calls through the single log sink.
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>

#include "../support/log_capture.h"
#include "model/batch.h"
#include "model_test_util.h"
#include "util/error.h"
#include "util/log.h"
#include "util/trace.h"

namespace mla {
namespace {

using testing::CaptureLog;
using testing::count_occurrences;

TEST(Trace, DispatchLogsFirstNCallsPerLayer) {
  auto b = load_deepseek2(testing::synth_file("trace_model", testing::small_spec()), {});
  Deepseek2Model m(b->config, b->weights, {});
  LatentCache cache = m.make_cache(16);
  std::vector<float> logits(8 * 64);
  trace_configure("dispatch:2");
  {
    CaptureLog cap;
    m.forward(single_sequence_batch({1, 2, 3, 4}, 0, false, MlaPathPolicy::Auto), cache, logits.data());
    m.forward(single_sequence_batch({5}, 4, false, MlaPathPolicy::Auto), cache, logits.data());
    m.forward(single_sequence_batch({6}, 5, false, MlaPathPolicy::Auto), cache, logits.data());
    std::string t = cap.text();
    // The 4-token prefill goes where the model's auto sends prefill chunks on this build target.
    const std::string prefill = m.auto_prefill_path() == MlaPath::Mqa ? "num_mqa=1 num_mha=0" : "num_mqa=0 num_mha=1";
    EXPECT_EQ(count_occurrences(t, "dispatch layer=blk.0 is_sparse=0 " + prefill + " total_toks=4 policy=auto"), 1)
        << t;
    EXPECT_EQ(count_occurrences(t, "dispatch layer=blk.1 is_sparse=0 " + prefill + " total_toks=4 policy=auto"), 1)
        << t;
    EXPECT_EQ(count_occurrences(t, "dispatch layer=blk.0 is_sparse=0 num_mqa=1 num_mha=0 total_toks=1 policy=auto"), 1)
        << t;
    EXPECT_EQ(count_occurrences(t, "dispatch layer="), 4) << t;  // the third call is past N = 2
  }
  trace_reset();
  {
    CaptureLog cap;
    m.forward(single_sequence_batch({7}, 6, false, MlaPathPolicy::Mha), cache, logits.data());
    EXPECT_EQ(count_occurrences(cap.text(), "dispatch"), 0);
  }
}

TEST(Trace, SpecParsing) {
  EXPECT_NO_THROW(trace_configure("dispatch:0"));
  EXPECT_EQ(trace_dispatch_limit(), 0);
  setenv("MLA_TRACE", "dispatch:7", 1);
  trace_configure_from_env();
  EXPECT_EQ(trace_dispatch_limit(), 7);
  unsetenv("MLA_TRACE");
  try {
    trace_configure("dispatch");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs a count"), std::string::npos);
  }
  try {
    trace_configure("dispatch:x");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("non-negative integer"), std::string::npos);
  }
  try {
    trace_configure("kernels:3");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown item 'kernels'"), std::string::npos);
  }
  trace_reset();
  EXPECT_EQ(trace_dispatch_limit(), 0);
}

TEST(Trace, AutoPrefillPathFollowsThePerPairCost) {
  // GLM-5 / DeepSeek-V3 (512, 192, 64, 256), V2-Lite (512, 128, 64, 128) and the tiny model
  // (256, 32, 32, 64): MQA's 1088 (544) multiply-adds per pair and head at its rate against MHA's
  // 512, 320 (128) + decompression at its rate. With the exact kernels (both in double) MHA is the
  // cheaper prefill on every target (AVX-512: 17.4 against 22.1 GMAC/s; AVX2: 11.1 against 13.6);
  // with the F32 ones too since the tiled MHA kernel (AVX-512: 58 against 39; AVX2: 25 against
  // 16). docs/PERF.md, issues 19 and 25.
  for (bool exact : {true, false}) {
    EXPECT_EQ(cheaper_prefill_path(512, 192, 64, 256, exact), MlaPath::Mha) << exact;
    EXPECT_EQ(cheaper_prefill_path(512, 128, 64, 128, exact), MlaPath::Mha) << exact;
    EXPECT_EQ(cheaper_prefill_path(256, 32, 32, 64, exact), MlaPath::Mha) << exact;
  }
  // A wide latent with narrow heads tips the rule to MHA on every target, a narrow one with wide
  // heads to MQA.
  EXPECT_EQ(cheaper_prefill_path(8192, 16, 16, 16), MlaPath::Mha);
  EXPECT_EQ(cheaper_prefill_path(16, 512, 16, 512), MlaPath::Mqa);
}

// The model alone decides the path (Deepseek2Model::mla_path) and counts what it sent: auto sends
// query lengths <= the batch's decode threshold (and speculative verify rows) down MQA and longer
// ones down its auto_prefill_path(); mha / mqa force the path. Nothing before the model chooses.
TEST(Trace, TheModelDecidesAndCountsThePaths) {
  auto b = load_deepseek2(testing::synth_file("trace_model", testing::small_spec()), {});
  Deepseek2Model m(b->config, b->weights, {});
  const DeepseekConfig& c = b->config;
  EXPECT_EQ(m.auto_prefill_path(), cheaper_prefill_path(c.kv_lora_rank, c.qk_nope, c.qk_rope, c.v_head));
  LatentCache cache = m.make_cache(64);
  std::vector<float> logits(16 * c.n_vocab);
  const PathCounters& k = m.path_counters();
  // Runs b and returns the (mha, mqa) tokens the model counted for it.
  auto run = [&](BatchMeta bm) {
    const int64_t mha = k.tokens_mha, mqa = k.tokens_mqa;
    m.forward(bm, cache, logits.data());
    return std::pair<int64_t, int64_t>{k.tokens_mha.load() - mha, k.tokens_mqa.load() - mqa};
  };
  const std::vector<int32_t> seven = {1, 2, 3, 4, 5, 6, 7};
  const auto prefill =
      m.auto_prefill_path() == MlaPath::Mha ? std::pair<int64_t, int64_t>{7, 0} : std::pair<int64_t, int64_t>{0, 7};
  EXPECT_EQ(run(single_sequence_batch(seven, 0, false, MlaPathPolicy::Auto)), prefill);
  EXPECT_EQ(run(single_sequence_batch({8}, 7, false, MlaPathPolicy::Auto)), (std::pair<int64_t, int64_t>{0, 1}));
  EXPECT_EQ(run(single_sequence_batch(seven, 8, false, MlaPathPolicy::Mha)), (std::pair<int64_t, int64_t>{7, 0}));
  EXPECT_EQ(run(single_sequence_batch({9}, 15, false, MlaPathPolicy::Mha)), (std::pair<int64_t, int64_t>{1, 0}));
  EXPECT_EQ(run(single_sequence_batch(seven, 16, false, MlaPathPolicy::Mqa)), (std::pair<int64_t, int64_t>{0, 7}));
  BatchMeta wide = single_sequence_batch(seven, 23, false, MlaPathPolicy::Auto);
  wide.decode_threshold = 7;  // 7 tokens are a "decode" under this threshold
  EXPECT_EQ(run(wide), (std::pair<int64_t, int64_t>{0, 7}));
  BatchMeta verify = single_sequence_batch({1, 2, 3}, 30, true, MlaPathPolicy::Auto);
  verify.seqs[0].verify = true;  // speculative verify rows take the decode's path
  EXPECT_EQ(run(verify), (std::pair<int64_t, int64_t>{0, 3}));
  // Every trunk layer is dense here: tokens x layers, each one's decision the same as layer 0's.
  EXPECT_EQ(k.dense_layer_tokens_mha.load(), k.tokens_mha * c.n_layer);
  EXPECT_EQ(k.dense_layer_tokens_mqa.load(), k.tokens_mqa * c.n_layer);
  EXPECT_EQ(k.sparse_layer_tokens_mha.load() + k.sparse_layer_tokens_mqa.load(), 0);
}

}  // namespace
}  // namespace mla
