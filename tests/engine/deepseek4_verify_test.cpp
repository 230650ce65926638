// `mla run --verify-paths` on deepseek4 (Deepseek4RunnerOptions::verify_dense): every chunk of every
// sequence rerun with CSA over every visible entry. Where top-k keeps every entry the two agree to
// rounding and the kept logits are what the runner gives without verification, bit for bit; past
// top_k the chunks are not compared, and comparing them anyway (verify_beyond_top_k) must show the
// difference the indexer's choice makes, so the check can fail. Sizes from transformers' config of
// the fixture (reference.json).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../support/log_capture.h"
#include "engine/deepseek4_runner.h"
#include "model/batch.h"

namespace mla {
namespace {

const std::string kDir = std::string(MLA_SOURCE_DIR) + "/tests/fixtures/deepseek4/mixed/";

// Two sequences (prompt lengths n0 and n1) in one batch per step, chunks of `chunk` tokens each;
// every row's logits, per sequence in position order.
std::vector<std::vector<float>> run(Deepseek4Runner& runner, const std::vector<int64_t>& lengths, int32_t chunk) {
  const auto V = static_cast<size_t>(runner.n_vocab());
  std::vector<std::vector<float>> out(lengths.size());
  std::vector<int32_t> done(lengths.size(), 0);
  for (bool more = true; more;) {
    BatchMeta meta;
    more = false;
    for (size_t i = 0; i < lengths.size(); ++i) {
      const int32_t n = std::min<int32_t>(chunk, static_cast<int32_t>(lengths[i]) - done[i]);
      if (n <= 0) continue;
      more = true;
      std::vector<int32_t> ids;
      for (int32_t t = done[i]; t < done[i] + n; ++t) ids.push_back(static_cast<int32_t>((7 * t + 3 * i + 1) % V));
      append_sequence_chunk(meta, i + 1, ids, done[i]);
      done[i] += n;
    }
    if (!more) break;
    std::vector<float> logits(meta.logits_rows.size() * V);
    runner.forward(meta, logits.data());
    size_t row = 0;
    for (const SeqMeta& s : meta.seqs) {
      auto& dst = out[s.seq_id - 1];
      dst.insert(dst.end(), logits.begin() + row * V, logits.begin() + (row + s.query_len) * V);
      row += s.query_len;
    }
  }
  return out;
}

struct Sizes {
  int64_t m = 0, top_k = 0;
};
Sizes sizes() {
  std::ifstream in(kDir + "reference.json");
  const nlohmann::json cfg = nlohmann::json::parse(in)["config"];
  return {cfg["compress_rates"]["compressed_sparse_attention"].get<int64_t>(), cfg["index_topk"].get<int64_t>()};
}

Deepseek4RunnerOptions options(bool verify, bool beyond = false) {
  Deepseek4RunnerOptions o;
  o.n_threads = 2;
  o.max_num_seqs = 2;
  o.verify_dense = verify;
  o.verify_beyond_top_k = beyond;
  return o;
}

TEST(Deepseek4Verify, AgreesWithinTopKAndKeepsTheSparseResult) {
  const Sizes sz = sizes();
  const int64_t full = sz.m * (sz.top_k + 1) - 1;  // the longest prompt whose queries see <= top_k entries
  const std::vector<int64_t> lengths = {full, 3 * full};
  Deepseek4Runner plain(kDir + "model-f32.gguf", options(false));
  Deepseek4Runner verified(kDir + "model-f32.gguf", options(true));
  testing::CaptureLog cap;
  const auto want = run(plain, lengths, 8);
  const auto got = run(verified, lengths, 8);
  EXPECT_EQ(got, want);  // verification leaves the served logits as they are
  const Ds4VerifyLog& v = verified.verify_log();
  // Chunks of 8 ending at e are compared when e / m <= top_k: e <= full.
  int64_t compared = 0, beyond = 0;
  for (int64_t n : lengths)
    for (int64_t e = 8; e < n + 8; e += 8) ++(std::min(e, n) <= full ? compared : beyond);
  EXPECT_EQ(v.n_compared, compared);
  EXPECT_EQ(v.n_beyond_top_k, beyond);
  EXPECT_LE(v.max_logits_rel, 1e-4);
  EXPECT_GT(v.max_logits_rel, 0.0);  // the sums run in another order: rounding, not identity
  EXPECT_TRUE(v.greedy_agree);
  EXPECT_NE(cap.text().find("verify-paths seq=1 pos0=0 tokens=8 (CSA rerun over every entry)"), std::string::npos)
      << cap.text();
  EXPECT_EQ(plain.verify_log().n_compared, 0);
}

TEST(Deepseek4Verify, PastTopKTheComparisonFails) {
  const Sizes sz = sizes();
  Deepseek4Runner verified(kDir + "model-f32.gguf", options(true, /*beyond=*/true));
  run(verified, {12 * sz.m * sz.top_k}, 16);  // the last queries see 12 x top_k entries
  const Ds4VerifyLog& v = verified.verify_log();
  EXPECT_EQ(v.n_beyond_top_k, 0);
  EXPECT_GT(v.max_logits_rel, 1e-4);
}

}  // namespace
}  // namespace mla
