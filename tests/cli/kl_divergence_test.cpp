// The KL-divergence base file and statistics (src/cli/kl_divergence.h). Files are built byte by
// byte here from the layout llama.cpp's perplexity tool reads and writes (magic, uint32 n_ctx,
// int32 n_vocab, int32 n_chunk, int32 tokens, then per scored position float32 scale, float32
// min_log_prob and n_vocab uint16 levels padded to an even count); expected statistics are worked
// out by hand from the definitions. tests/py/test_kl_divergence.py checks the same code against
// llama-perplexity's own files and figures.
#include "cli/kl_divergence.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "../support/random.h"
#include "util/error.h"

namespace mla::cli {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Exact log-softmax in double.
std::vector<double> log_softmax(const std::vector<float>& logits) {
  double mx = logits[0];
  for (float x : logits) mx = std::max<double>(mx, x);
  double sum = 0;
  for (float x : logits) sum += std::exp(x - mx);
  std::vector<double> out;
  for (float x : logits) out.push_back(x - mx - std::log(sum));
  return out;
}

// A base file's bytes, appended field by field.
struct Bytes {
  std::string b;
  template <typename T>
  Bytes& put(T v) {
    b.append(reinterpret_cast<const char*>(&v), sizeof(v));
    return *this;
  }
  Bytes& header(uint32_t n_ctx, int32_t n_vocab, int32_t n_chunk, const char* magic = "_logits_") {
    b.append(magic, 8);
    return put(n_ctx).put(n_vocab).put(n_chunk);
  }
  // One row: scale, min_log_prob, levels, a zero pad word when n_vocab is odd.
  Bytes& row(float scale, float min_log_prob, const std::vector<uint16_t>& levels) {
    put(scale).put(min_log_prob);
    for (uint16_t q : levels) put(q);
    if (levels.size() % 2) put(uint16_t{0});
    return *this;
  }
};

class KlDivergenceFile : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "mla_kld_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string write(const std::string& name, const std::string& bytes) const {
    const std::string path = (fs::path(dir_) / name).string();
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path;
  }
  // What reading `path` (header, then every chunk) throws; "" when it does not.
  static std::string read_error(const std::string& path) {
    try {
      KldBaseReader r(path);
      for (int32_t c = 0; c < r.header().n_chunk; ++c) r.read_chunk(c);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  // A valid file: n_ctx 6 (rows at positions 3, 4: two per chunk), n_vocab 3 (odd: padded),
  // two chunks; row k of chunk c has scale 0.5 + c, min_log_prob -10 - k, levels {k, 7, 65535}.
  static Bytes valid_file() {
    Bytes f;
    f.header(6, 3, 2);
    for (int32_t t = 0; t < 12; ++t) f.put(t % 3);
    for (int c = 0; c < 2; ++c)
      for (int k = 0; k < 2; ++k) f.row(0.5f + c, -10.0f - k, {static_cast<uint16_t>(k), 7, 65535});
    return f;
  }
  std::string dir_;
};

TEST(KlDivergence, RowWordsAreTwoFloatsAndLevelsPaddedToEven) {
  EXPECT_EQ(kld_row_words(4096), 4100);
  EXPECT_EQ(kld_row_words(4097), 4102);
  EXPECT_EQ(kld_row_words(129280), 129284);
  EXPECT_EQ(kld_row_words(1), 6);
}

// Every log-probability within the row's range comes back within half a level of the exact value;
// those below it read as the range's bottom (which is above them); the top token is level 65535.
TEST(KlDivergence, EncodedRowKeepsLogProbabilitiesToHalfALevel) {
  const int64_t n_vocab = 1001;  // odd: the pad word
  std::vector<float> logits = randn(n_vocab, 7, 6.0f);
  logits[17] = 40.0f;  // a clear top; many logits end up more than 24 below it
  std::vector<uint16_t> row(kld_row_words(n_vocab), 0xFFFF);
  encode_kld_row(logits.data(), n_vocab, row.data());
  const std::vector<double> exact = log_softmax(logits);
  float scale = 0, min_log_prob = 0;
  std::memcpy(&scale, row.data(), 4);
  std::memcpy(&min_log_prob, row.data() + 2, 4);
  EXPECT_NEAR(scale, kKldRowRange / 65535, 1e-9);
  EXPECT_EQ(row[4 + 17], 65535);
  EXPECT_EQ(row.back(), 0) << "pad word";
  int below = 0;
  for (int64_t i = 0; i < n_vocab; ++i) {
    const double got = kld_row_log_prob(row.data(), static_cast<int32_t>(i));
    if (logits[i] > logits[17] - kKldRowRange) {
      EXPECT_NEAR(got, exact[i], 0.5 * scale + 1e-5) << i;
    } else {
      ++below;
      EXPECT_EQ(row[4 + i], 0) << i;
      EXPECT_GT(got, exact[i]) << i;
    }
  }
  EXPECT_GT(below, 100);
}

TEST(KlDivergence, FlatRowHasZeroScale) {
  const std::vector<float> logits(4, 1.5f);
  std::vector<uint16_t> row(kld_row_words(4));
  encode_kld_row(logits.data(), 4, row.data());
  for (int32_t i = 0; i < 4; ++i) EXPECT_NEAR(kld_row_log_prob(row.data(), i), std::log(0.25), 1e-6);
}

TEST_F(KlDivergenceFile, ReadsTheLayoutByteByByte) {
  KldBaseReader r(write("base.kld", valid_file().b));
  EXPECT_EQ(r.header().n_ctx, 6);
  EXPECT_EQ(r.header().n_vocab, 3);
  EXPECT_EQ(r.header().n_chunk, 2);
  EXPECT_EQ(r.header().rows_per_chunk(), 2);
  ASSERT_EQ(r.tokens().size(), 12u);
  EXPECT_EQ(r.tokens()[4], 1);
  r.read_chunk(1);
  EXPECT_FLOAT_EQ(kld_row_log_prob(r.row(1), 0), 1.5f * 1 - 11.0f);
  EXPECT_FLOAT_EQ(kld_row_log_prob(r.row(1), 1), 1.5f * 7 - 11.0f);
  r.read_chunk(0);
  EXPECT_FLOAT_EQ(kld_row_log_prob(r.row(0), 2), 0.5f * 65535 - 10.0f);
}

TEST_F(KlDivergenceFile, WriterOutputReadsBackAsWritten) {
  const KldBaseHeader h{8, 5, 2};  // rows at positions 4, 5, 6
  std::vector<int32_t> tokens(16);
  for (int32_t i = 0; i < 16; ++i) tokens[i] = (i * 3) % 5;
  const std::string path = (fs::path(dir_) / "w.kld").string();
  std::vector<std::vector<float>> rows;
  {
    KldBaseWriter w(path, h, tokens);
    for (int k = 0; k < 6; ++k) {
      rows.push_back(randn(5, 100 + k, 3.0f));
      w.write_row(rows.back().data());
    }
    w.finish();
  }
  EXPECT_EQ(fs::file_size(path), 20u + 16 * 4 + 6 * kld_row_words(5) * 2);
  KldBaseReader r(path);
  EXPECT_EQ(r.tokens(), tokens);
  std::vector<uint16_t> want(kld_row_words(5));
  for (int c = 0; c < 2; ++c) {
    r.read_chunk(c);
    for (int k = 0; k < 3; ++k) {
      encode_kld_row(rows[c * 3 + k].data(), 5, want.data());
      EXPECT_EQ(0, std::memcmp(r.row(k), want.data(), want.size() * 2)) << c << " " << k;
    }
  }
}

TEST_F(KlDivergenceFile, RejectsBadFilesWithOneLine) {
  const std::string good = valid_file().b;
  EXPECT_EQ(read_error(write("good", good)), "");
  EXPECT_THAT(read_error((fs::path(dir_) / "missing").string()), HasSubstr("cannot open"));
  EXPECT_THAT(read_error(write("short", good.substr(0, 11))), HasSubstr("shorter than a base file's 20-byte header"));
  std::string magic = good;
  magic[1] = 'L';
  EXPECT_THAT(read_error(write("magic", magic)), HasSubstr("does not start with \"_logits_\""));
  EXPECT_THAT(read_error(write("trunc", good.substr(0, good.size() - 1))), HasSubstr("the file is truncated"));
  EXPECT_THAT(read_error(write("trail", good + "x")), HasSubstr("trailing bytes"));
  EXPECT_THAT(read_error(write("ctx", Bytes().header(3, 3, 1).b)), HasSubstr("corrupt header: n_ctx 3"));
  EXPECT_THAT(read_error(write("vocab", Bytes().header(6, 0, 1).b)), HasSubstr("n_vocab 0"));
  EXPECT_THAT(read_error(write("chunks", Bytes().header(6, 3, -1).b)), HasSubstr("n_chunk -1"));
  // A header whose sizes multiply past 2^64 is a size mismatch, not an overflow.
  EXPECT_THAT(read_error(write("huge", Bytes().header(0x7fffffff, 0x7fffffff, 0x7fffffff).b)),
              HasSubstr("needs more than 2^64"));
  std::string token = good;
  const int32_t bad = 3;  // == n_vocab
  std::memcpy(token.data() + 20 + 5 * 4, &bad, 4);
  EXPECT_THAT(read_error(write("token", token)), HasSubstr("token 3 at position 5 is outside its vocabulary of 3"));
  std::string nan = good;
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  const size_t chunk1_row1 = 20 + 12 * 4 + 3 * kld_row_words(3) * 2;
  std::memcpy(nan.data() + chunk1_row1, &qnan, 4);
  EXPECT_THAT(read_error(write("nan", nan)), HasSubstr("chunk 1 row 1 has scale nan"));
}

// Two tokens, base (0.5, 0.5) (a flat row: scale 0), model (0.25, 0.75), next token 0:
// KL = 0.5 ln(0.5/0.25) + 0.5 ln(0.5/0.75) = 0.5 ln(4/3); the tops differ (the base's first index);
// Δp = 0.25 - 0.5.
TEST(KlDivergence, OneTokenByHand) {
  const std::vector<float> base_logits = {0.0f, 0.0f};
  std::vector<uint16_t> row(kld_row_words(2));
  encode_kld_row(base_logits.data(), 2, row.data());
  const std::vector<float> logits = {std::log(0.25f), std::log(0.75f)};
  KldAccumulator acc;
  acc.add(logits.data(), 2, row.data(), 0);
  ASSERT_EQ(acc.count(), 1);
  EXPECT_NEAR(acc.kld_values()[0], 0.5 * std::log(4.0 / 3.0), 1e-6);
  EXPECT_NEAR(acc.p_diff_values()[0], -0.25, 1e-6);
  EXPECT_EQ(acc.sums().n_same_top, 0);
  const KldSummary s = summarize_kld(acc, true);
  EXPECT_NEAR(s.ppl.value, 4.0, 1e-5);
  EXPECT_NEAR(s.ppl_base.value, 2.0, 1e-5);
  EXPECT_NEAR(s.ln_ppl_ratio.value, std::log(2.0), 1e-6);
  EXPECT_NEAR(s.ppl_diff.value, 2.0, 1e-5);
  EXPECT_EQ(s.ppl.error, 0.0) << "no error from 10 values or fewer";
  EXPECT_NEAR(s.rms_delta_p.value, 0.25, 1e-6);
  EXPECT_EQ(s.same_top.value, 0.0);
}

// Base tokens with log-probability at or below -16 are left out of the sum: base logits (0, 0, -20)
// against a flat model give 2 * 0.5 * ln(0.5 / (1/3)) = ln 1.5 (the third term, 2e-9 * 19, dropped).
TEST(KlDivergence, BaseTokensBelowMinus16AreLeftOut) {
  const std::vector<float> base_logits = {0.0f, 0.0f, -20.0f};
  std::vector<uint16_t> row(kld_row_words(3));
  encode_kld_row(base_logits.data(), 3, row.data());
  const std::vector<float> flat = {0.0f, 0.0f, 0.0f};
  KldAccumulator acc;
  acc.add(flat.data(), 3, row.data(), 2);
  EXPECT_NEAR(acc.kld_values()[0], std::log(1.5), 1e-3);  // 1e-3: the levels' rounding
  EXPECT_NEAR(acc.sums().nll_base, 20 + std::log(2.0), 1e-3);
  EXPECT_EQ(acc.sums().n_same_top, 1);  // both take the first maximum
}

// The base is the model itself: only the levels' rounding (at most half of scale ~ 2e-4 per
// log-probability, unbiased) is left, which moves each token's KL by ~1e-5 and the mean of 200 by
// ~1e-6.
TEST(KlDivergence, SameDistributionGivesZero) {
  const int64_t n_vocab = 512;
  KldAccumulator acc;
  std::vector<uint16_t> row(kld_row_words(n_vocab));
  for (int k = 0; k < 200; ++k) {
    const std::vector<float> logits = randn(n_vocab, 1000 + k, 2.0f);
    encode_kld_row(logits.data(), n_vocab, row.data());
    acc.add(logits.data(), n_vocab, row.data(), k % n_vocab);
  }
  const KldSummary s = summarize_kld(acc, true);
  EXPECT_LT(std::abs(s.kld.value), 1e-5);
  EXPECT_EQ(s.same_top.value, 1.0);
  EXPECT_NEAR(s.ppl_ratio.value, 1.0, 1e-5);
  EXPECT_LT(s.rms_delta_p.value, 1e-5);
  EXPECT_NEAR(s.cor_ln_ppl, 1.0, 1e-3);
  ASSERT_EQ(s.kld_quantiles.size(), 11u);
  ASSERT_EQ(s.delta_p_quantiles.size(), 13u);
  EXPECT_EQ(s.kld_quantiles.front().fraction, 1.0);
  EXPECT_LT(s.kld_quantiles.front().value, 1e-4);  // the largest
  EXPECT_EQ(s.kld_quantiles.back().fraction, 0.0);
}

// llama.cpp's percentile: linear between the sorted values around fraction * (n - 1).
TEST(KlDivergence, PercentilesInterpolateBetweenSortedValues) {
  const std::vector<float> v = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  EXPECT_NEAR(kld_percentile(v, 0.9f), 8.1, 1e-5);
  EXPECT_NEAR(kld_percentile(v, 0.999f), 8.991, 1e-5);
  EXPECT_NEAR(kld_percentile(v, 0.05f), 0.45, 1e-5);
  EXPECT_EQ(kld_percentile(v, 0.0f), 0.0);
  EXPECT_EQ(kld_percentile(v, 1.0f), 9.0);
  EXPECT_EQ(kld_median(v), 4.5);
  EXPECT_EQ(kld_median({1, 2, 7}), 2.0);
}

TEST(KlDivergence, JsonNamesEveryQuantile) {
  KldAccumulator acc;
  const std::vector<float> base_logits = {0.0f, 1.0f, 2.0f};
  std::vector<uint16_t> row(kld_row_words(3));
  encode_kld_row(base_logits.data(), 3, row.data());
  for (int k = 0; k < 3; ++k) acc.add(randn(3, 50 + k).data(), 3, row.data(), k);
  const nlohmann::json j = kld_summary_json(summarize_kld(acc, true));
  for (const char* key : {"max", "p99.9", "p99", "p95", "p90", "median", "p10", "p5", "p1", "p0.1", "min", "mean"})
    EXPECT_TRUE(j["kld"].contains(key)) << key;
  for (const char* key : {"p75", "p25"}) EXPECT_TRUE(j["delta_p"].contains(key)) << key;
  EXPECT_EQ(j["scored_tokens"], 3);
}

}  // namespace
}  // namespace mla::cli
