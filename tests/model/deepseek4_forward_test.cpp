// DeepSeek-V4 (`deepseek4`): the full-sequence forward pass against transformers 5.25.0's logits at
// every position of the committed tiny references (tools/deepseek4/make_fixtures.py).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/deepseek4.h"
#include "model_test_util.h"
#include "quant/kernel_choice.h"
#include "quant/packed.h"
#include "quant/quant.h"
#include "util/error.h"

namespace mla {
namespace {

std::string fixture(const std::string& model, const std::string& file) {
  return std::string(MLA_SOURCE_DIR) + "/tests/fixtures/deepseek4/" + model + "/" + file;
}

nlohmann::json reference(const std::string& model) {
  std::ifstream in(fixture(model, "reference.json"));
  return nlohmann::json::parse(in);
}

std::vector<float> reference_logits(const std::string& model, size_t n) {
  std::vector<float> v(n);
  std::ifstream in(fixture(model, "logits.f32"), std::ios::binary);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(float)));
  EXPECT_EQ(static_cast<size_t>(in.gcount()), n * sizeof(float)) << model << ": logits.f32 is short";
  return v;
}

// The logits at every position against transformers', relative to the position's largest
// |logit|, and the greedy token at every position. The prompt runs as consecutive chunks of
// chunk_sizes (cycled; empty: one chunk) through one cache.
void check_logits(const std::string& model, const std::vector<int64_t>& chunk_sizes, const char* label,
                  double tolerance = 1e-4, const std::string& gguf_path = "", bool repack = false) {
  const nlohmann::json ref = reference(model);
  auto b = load_deepseek4(gguf_path.empty() ? fixture(model, ref["gguf"].get<std::string>()) : gguf_path, repack);
  if (repack) ASSERT_NE(b->weights.packed, nullptr) << model << ": nothing was repacked";
  const std::vector<int32_t> tokens = ref["token_ids"].get<std::vector<int32_t>>();
  const int64_t V = b->config.n_vocab, T = static_cast<int64_t>(tokens.size());
  ASSERT_EQ(V, ref["n_vocab"].get<int64_t>());
  const std::vector<float> want = reference_logits(model, static_cast<size_t>(T * V));
  std::vector<float> got(static_cast<size_t>(T * V));
  Deepseek4Model m(b->config, b->weights, 2);
  if (chunk_sizes.empty()) {
    m.prefill(tokens, got.data());
  } else {
    Deepseek4Cache cache = m.make_cache();
    for (int64_t t = 0, i = 0; t < T; ++i) {
      const int64_t n = std::min(chunk_sizes[i % chunk_sizes.size()], T - t);
      m.forward(std::vector<int32_t>(tokens.begin() + t, tokens.begin() + t + n), cache, got.data() + t * V);
      t += n;
    }
    EXPECT_EQ(cache.n_past, T);
  }
  double worst = 0;
  int64_t worst_t = 0;
  for (int64_t t = 0; t < T; ++t) {
    double diff = 0, mag = 0;
    int64_t arg_got = 0, arg_want = 0;
    for (int64_t v = 0; v < V; ++v) {
      diff = std::max(diff, static_cast<double>(std::fabs(got[t * V + v] - want[t * V + v])));
      mag = std::max(mag, static_cast<double>(std::fabs(want[t * V + v])));
      if (got[t * V + v] > got[t * V + arg_got]) arg_got = v;
      if (want[t * V + v] > want[t * V + arg_want]) arg_want = v;
    }
    if (diff / mag > worst) worst = diff / mag, worst_t = t;
    if (tolerance <= 1e-4)  // exact weights and activations: the argmax must agree too
      EXPECT_EQ(arg_got, arg_want) << model << " " << label << ": greedy token differs at position " << t;
  }
  EXPECT_LE(worst, tolerance) << model << " " << label << ": worst position " << worst_t;
  std::printf("[ %s %s ] %lld positions, worst relative logit difference %.2e at position %lld\n", model.c_str(), label,
              static_cast<long long>(T), worst, static_cast<long long>(worst_t));
}

TEST(Deepseek4Forward, PrefillMatchesTransformersMixed) { check_logits("mixed", {}, "prefill"); }
TEST(Deepseek4Forward, PrefillMatchesTransformersYarn) { check_logits("yarn", {}, "prefill"); }

// Token by token through the compressed cache: every HCA/CSA window closes during decode, the
// CSA overlap (series A) crosses calls, the window ring wraps.
TEST(Deepseek4Forward, DecodeTokenByTokenMatchesTransformersMixed) { check_logits("mixed", {1}, "decode"); }
TEST(Deepseek4Forward, DecodeTokenByTokenMatchesTransformersYarn) { check_logits("yarn", {1}, "decode"); }

// Chunks that start and end mid-window (sizes prime to 4 and 128) and one long chunk then decode.
TEST(Deepseek4Forward, ChunkedPrefillMatchesTransformers) {
  check_logits("mixed", {7, 3, 29, 1, 50}, "chunks 7,3,29,1,50");
  check_logits("yarn", {5, 17, 2}, "chunks 5,17,2");
  check_logits("mixed", {130, 1}, "130 then decode");
}

// Routed experts stored as MXFP4 blocks (the published files' format), holding exactly the weights
// transformers ran. Dequantized to F32 the file must match to 1e-4 (the blocks decode to those
// weights, in the layout the loader assumes). Run as MXFP4, the expert matmuls quantize their
// activations to Q8_0 (as ggml's MXFP4 dot does): 4.2e-2 relative at worst on this tiny chaotic
// model, the same in the scalar, AVX2 and AVX-512 families and without repacking; a wrong block
// layout or expert slice gives errors of order 1.
constexpr double kMxfp4Tolerance = 8e-2;
TEST(Deepseek4Forward, Mxfp4ExpertsMatchTransformers) {
  auto f = GgufFile::open(fixture("mxfp4", "model-mxfp4.gguf"));
  ASSERT_EQ(f->require_tensor("blk.1.ffn_down_exps.weight").type, GgmlType::MXFP4);
  const std::string f32 = testing::temp_dir() + "/ds4-mxfp4-as-f32.gguf";
  testing::rewrite_gguf(fixture("mxfp4", "model-mxfp4.gguf"), f32, [](const std::string&, testing::TensorEdit& e) {
    if (e.type != GgmlType::MXFP4) return true;
    std::vector<uint8_t> out(e.data.size() / 17 * 32 * sizeof(float));
    for (size_t b = 0; b < e.data.size() / 17; ++b)
      dequantize_row(GgmlType::MXFP4, e.data.data() + b * 17, reinterpret_cast<float*>(out.data()) + b * 32, 32);
    e.type = GgmlType::F32;
    e.data = std::move(out);
    return true;
  });
  check_logits("mxfp4", {}, "dequantized to f32", 1e-4, f32);
  check_logits("mxfp4", {}, "prefill", kMxfp4Tolerance);
  check_logits("mxfp4", {1}, "decode", kMxfp4Tolerance);
}

// The same file with its matrices repacked into 16-row groups (what `mla serve` loads): the packed
// GEMM reads the MXFP4 experts (and any other packable matrix) from the copies.
TEST(Deepseek4Forward, Mxfp4ExpertsRepackedMatchTransformers) {
  if (packed_gemm_family() == std::string("none"))
    GTEST_SKIP() << "SKIPPED LOUDLY: this kernel family has no packed GEMM (" << simd_level_name(simd_level())
                 << "), so there is nothing to repack";
  check_logits("mxfp4", {}, "repacked prefill", kMxfp4Tolerance, "", /*repack=*/true);
  check_logits("mxfp4", {1, 5}, "repacked decode and chunks", kMxfp4Tolerance, "", /*repack=*/true);
}

TEST(Deepseek4Forward, RefusesATokenOutsideTheVocabulary) {
  auto b = load_deepseek4(fixture("yarn", "model-f32.gguf"));
  Deepseek4Model m(b->config, b->weights, 1);
  std::vector<float> logits(static_cast<size_t>(2 * b->config.n_vocab));
  try {
    m.prefill({1, static_cast<int32_t>(b->config.n_vocab)}, logits.data());
    FAIL() << "token id n_vocab accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 48 outside the vocabulary (0..47)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mla

namespace mla {
namespace {

// forward_batch: three sequences at different positions, each step mixing a prefill chunk with
// decode tokens, give every sequence's rows the bits of its lone forward calls (the batched
// matmuls and MoE compute each row as a batch of one would; attention stays per sequence).
TEST(Deepseek4Forward, BatchOfSequencesGivesEachItsLoneBits) {
  const nlohmann::json ref = reference("mixed");
  auto b = load_deepseek4(fixture("mixed", ref["gguf"].get<std::string>()));
  const std::vector<int32_t> all = ref["token_ids"].get<std::vector<int32_t>>();
  const int64_t V = b->config.n_vocab;
  Deepseek4Model m(b->config, b->weights, 2);
  // Sequence i reads all[offset_i ..]; its steps are the chunk sizes listed for it.
  const std::vector<int64_t> offsets = {0, 17, 60};
  const std::vector<std::vector<int64_t>> steps = {{40, 1, 1, 90, 1}, {1, 1, 1, 1, 1}, {131, 7, 1, 1, 3}};
  std::vector<Deepseek4Cache> lone(3, m.make_cache()), batched(3, m.make_cache());
  std::vector<int64_t> at(3, 0);
  for (size_t step = 0; step < steps[0].size(); ++step) {
    std::vector<std::vector<int32_t>> toks(3), rows(3);
    std::vector<Deepseek4Model::Seq> seqs;
    std::vector<float> want;
    for (size_t i = 0; i < 3; ++i) {
      const int64_t n = steps[i][step];
      toks[i].assign(all.begin() + offsets[i] + at[i], all.begin() + offsets[i] + at[i] + n);
      rows[i] = {0, static_cast<int32_t>(n - 1)};
      if (n == 1) rows[i].pop_back();
      std::vector<float> lg(rows[i].size() * static_cast<size_t>(V));
      m.forward(toks[i], lone[i], lg.data(), rows[i]);
      want.insert(want.end(), lg.begin(), lg.end());
      seqs.push_back({toks[i], &batched[i], rows[i]});
      at[i] += n;
    }
    std::vector<float> got(want.size());
    m.forward_batch(seqs, got.data());
    ASSERT_EQ(got, want) << "step " << step;
    for (size_t i = 0; i < 3; ++i) ASSERT_EQ(batched[i].n_past, at[i]);
  }
}

}  // namespace
}  // namespace mla
