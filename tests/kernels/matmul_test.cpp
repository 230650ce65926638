// matmul (threaded, tiled, SIMD vec_dot) against matmul_ref (scalar vec_dot_ref), and its
// batch invariance: a row's output bits do not depend on the batch size or thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "../quant/quant_test_util.h"
#include "../support/packed_kernels.h"
#include "../support/random.h"
#include "kernels/matmul.h"
#include "quant/quant.h"

namespace mla {
namespace {

struct Quantized {
  std::vector<uint8_t> bytes;
  WeightMatrix m;
};

Quantized make_weight(GgmlType t, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0, 1.0f / std::sqrt(static_cast<float>(cols)));
  std::vector<float> f(rows * cols);
  for (auto& x : f) x = d(rng);
  Quantized q;
  q.m.type = t;
  q.m.n_cols = cols;
  q.m.n_rows = rows;
  q.m.row_bytes = ggml_row_bytes(t, cols);
  q.bytes.resize(q.m.row_bytes * rows);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = q.bytes.data() + r * q.m.row_bytes;
    if (can_quantize(t)) {
      quantize_row(t, f.data() + r * cols, row, cols);
      continue;
    }
    // Types mla cannot write (the i-quants, Q5_0, MXFP4): random blocks whose scales are all 2^-9, so
    // values stay about the size of the quantized ones above.
    const auto raw = testing::random_row(t, cols, rng, testing::ScaleCase::Random);
    std::memcpy(row, raw.data(), raw.size());
    const uint16_t d = fp32_to_fp16(1.0f / 512);
    const auto& tr = ggml_traits(t);
    // ik_llama.cpp's row-scaled types: the row's scale heads the row (fp32 or fp16).
    if (tr.row_meta_bytes == 4) {
      // Trellis rows: levels up to 126 x block scales up to 127, so a far smaller row scale.
      const bool trellis =
          t == GgmlType::IQ1_KT || t == GgmlType::IQ2_KT || t == GgmlType::IQ3_KT || t == GgmlType::IQ4_KT;
      const float row_scale = trellis ? 1.0f / (1 << 20) : 1.0f / 512;
      std::memcpy(row, &row_scale, 4);
    } else if (tr.row_meta_bytes == 2) {
      std::memcpy(row, &d, 2);
    }
    for (int64_t b = 0; b < cols / tr.block_elems; ++b) {
      uint8_t* blk = row + tr.row_meta_bytes + b * tr.block_bytes;
      for (int off : testing::half_scale_offsets(t)) std::memcpy(blk + off, &d, 2);
      if (t == GgmlType::MXFP4) blk[0] = 120;               // E8M0: 2^-8, halved by the doubled levels
      if (t == GgmlType::NVFP4) std::memset(blk, 0x08, 4);  // UE4M3 sub-block scales: 2^-7
    }
  }
  q.m.data = q.bytes.data();
  return q;
}

class MatmulTypes : public ::testing::TestWithParam<GgmlType> {};

TEST_P(MatmulTypes, MatchesReference) {
  const GgmlType t = GetParam();
  const int64_t cols = 512, rows = 37, n_tok = 9;
  auto w = make_weight(t, rows, cols, 7);
  auto x = randn(n_tok * (cols + 3), 8);  // row stride cols + 3
  std::vector<float> y(n_tok * (rows + 1)), yr(n_tok * (rows + 1));
  ThreadPool pool(3);
  MatmulScratch scratch;
  matmul(w.m, x.data(), cols + 3, n_tok, y.data(), rows + 1, pool, scratch);
  matmul_ref(w.m, x.data(), cols + 3, n_tok, yr.data(), rows + 1);
  for (int64_t tk = 0; tk < n_tok; ++tk)
    for (int64_t r = 0; r < rows; ++r) {
      // sum|w x| is about sqrt(cols) here; kernels agree to float accumulation error.
      EXPECT_NEAR(y[tk * (rows + 1) + r], yr[tk * (rows + 1) + r], 2e-5 * std::sqrt(cols)) << tk << " " << r;
    }
}

TEST_P(MatmulTypes, RowResultsDoNotDependOnBatchOrThreads) {
  const GgmlType t = GetParam();
  const int64_t cols = 256, rows = 50, n_tok = 13;
  auto w = make_weight(t, rows, cols, 11);
  auto x = randn(n_tok * cols, 12);
  std::vector<float> batched(n_tok * rows), single(rows);
  ThreadPool pool4(4), pool1(1);
  MatmulScratch s4, s1;
  matmul(w.m, x.data(), cols, n_tok, batched.data(), rows, pool4, s4);
  for (int64_t tk = 0; tk < n_tok; ++tk) {
    matmul(w.m, x.data() + tk * cols, cols, 1, single.data(), rows, pool1, s1);
    EXPECT_EQ(0, std::memcmp(single.data(), batched.data() + tk * rows, sizeof(float) * rows)) << "token " << tk;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, MatmulTypes,
                         ::testing::Values(GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                                           GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::NVFP4, GgmlType::IQ2_KT,
                                           GgmlType::IQ4_KT, GgmlType::Q6_0, GgmlType::IQ2_K, GgmlType::IQ3_K,
                                           GgmlType::IQ4_K, GgmlType::IQ5_K, GgmlType::IQ6_K, GgmlType::IQ4_KS,
                                           GgmlType::IQ2_KS, GgmlType::IQ4_KSS, GgmlType::IQ5_KS, GgmlType::IQ3_KS,
                                           GgmlType::IQ2_KL),
                         [](const auto& info) { return std::string(ggml_type_name(info.param)); });

// Weights repacked into 16-row groups (AVX-512 VNNI or AVX2 CPUs): the packed path against matmul_ref,
// batch/thread invariance (the thread split and token tiles change, a row's bits must not), and
// expert slices taken with rows().
class PackedMatmul : public ::testing::TestWithParam<GgmlType> {};

TEST_P(PackedMatmul, MatchesReferenceAndIsBatchInvariant) {
  const GgmlType t = GetParam();
  const int64_t cols = t == GgmlType::Q8_0 ? 32 * 19 : 256 * 3, rows = 80, n_tok = 21;
  auto w = make_weight(t, rows, cols, 21);
  PackedWeightStore store;
  if (!repack_weight(w.m, 16, store)) GTEST_SKIP() << packed_kernels_unavailable_reason(t);
  ASSERT_NE(w.m.packed, nullptr);
  auto x = randn(n_tok * cols, 22);
  std::vector<float> y(n_tok * rows), yr(n_tok * rows), single(rows);
  ThreadPool pool3(3), pool1(1);
  MatmulScratch s3, s1;
  matmul(w.m, x.data(), cols, n_tok, y.data(), rows, pool3, s3);
  matmul_ref(w.m, x.data(), cols, n_tok, yr.data(), rows);
  for (int64_t i = 0; i < n_tok * rows; ++i) EXPECT_NEAR(y[i], yr[i], 2e-5 * std::sqrt(cols)) << i;
  for (int64_t tk = 0; tk < n_tok; ++tk) {
    matmul(w.m, x.data() + tk * cols, cols, 1, single.data(), rows, pool1, s1);
    EXPECT_EQ(0, std::memcmp(single.data(), y.data() + tk * rows, sizeof(float) * rows)) << "token " << tk;
  }
  // A slice of whole groups (an expert) keeps the packed rows; rows [16, 48) of it in two pieces.
  const WeightMatrix slice = w.m.rows(32, 48);
  ASSERT_NE(slice.packed, nullptr);
  const QuantizedActivations act = quantize_activations(t, x.data(), cols, n_tok, cols, nullptr, s1.act);
  std::vector<float> ys(n_tok * 48, -1.0f);
  matmul_rows(slice, act, n_tok, ys.data(), 48, 16, 21);
  matmul_rows(slice, act, n_tok, ys.data(), 48, 21, 48);
  for (int64_t tk = 0; tk < n_tok; ++tk)
    for (int64_t r = 16; r < 48; ++r) EXPECT_EQ(ys[tk * 48 + r], y[tk * rows + 32 + r]) << tk << " " << r;
  EXPECT_EQ(ys[0], -1.0f);                     // rows outside the range are not written
  EXPECT_EQ(w.m.rows(8, 16).packed, nullptr);  // not on a group boundary: the row-major path
}

TEST(PackedMatmulTest, RepackNeedsWholeGroupsPerSlice) {
  auto w = make_weight(GgmlType::Q8_0, 40, 64, 3);
  PackedWeightStore store;
  EXPECT_FALSE(repack_weight(w.m, 40, store));  // 40 rows are not whole groups of 16
  auto f = make_weight(GgmlType::Q4_1, 32, 256, 4);
  EXPECT_FALSE(repack_weight(f.m, 32, store));  // no packed layout
  EXPECT_EQ(store.bytes(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Types, PackedMatmul,
                         ::testing::Values(GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K,
                                           GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ2_XXS, GgmlType::IQ2_XS,
                                           GgmlType::IQ2_S, GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::IQ1_S,
                                           GgmlType::IQ1_M, GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::IQ4_NL,
                                           GgmlType::MXFP4, GgmlType::IQ4_XS),
                         [](const auto& info) { return std::string(ggml_type_name(info.param)); });

// matmul_multi: several matrices over one input in one region, split by bytes across threads,
// give every row the bits matmul gives it alone (and stay within float error of matmul_ref):
// two activation types (Q8_K for Q4_K, Q8_0 for Q8_0), packed groups next to row-major rows
// (40 rows are not whole groups), and a third type, which falls back to one matmul each.
TEST(MatmulMulti, EachMatrixGetsTheBitsOfItsOwnMatmul) {
  const int64_t cols = 1024;
  auto a = make_weight(GgmlType::Q4_K, 64, cols, 31);
  auto b = make_weight(GgmlType::Q8_0, 40, cols, 32);
  auto c = make_weight(GgmlType::F16, 24, cols, 33);
  PackedWeightStore store;
  repack_weight(a.m, 64, store);  // where this CPU has the packed kernels
  for (int64_t n_tok : {1, 5}) {
    auto x = randn(n_tok * cols, 34 + static_cast<uint32_t>(n_tok));
    const WeightMatrix* ws[3] = {&a.m, &b.m, &c.m};
    std::vector<float> alone[3], ref[3];
    ThreadPool pool1(1);
    MatmulScratch s1;
    for (int i = 0; i < 3; ++i) {
      alone[i].resize(n_tok * ws[i]->n_rows);
      ref[i].resize(alone[i].size());
      matmul(*ws[i], x.data(), cols, n_tok, alone[i].data(), ws[i]->n_rows, pool1, s1);
      matmul_ref(*ws[i], x.data(), cols, n_tok, ref[i].data(), ws[i]->n_rows);
      for (size_t k = 0; k < ref[i].size(); ++k) EXPECT_NEAR(alone[i][k], ref[i][k], 2e-5 * std::sqrt(cols)) << i;
    }
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      MatmulScratch s;
      std::vector<float> y[3];
      for (int i = 0; i < 3; ++i) y[i].assign(alone[i].size(), NAN);
      matmul_multi({{ws[0], y[0].data(), ws[0]->n_rows}, {ws[1], y[1].data(), ws[1]->n_rows}}, x.data(), cols, n_tok,
                   cols, pool, s);
      for (int i = 0; i < 2; ++i)
        EXPECT_EQ(0, std::memcmp(y[i].data(), alone[i].data(), sizeof(float) * y[i].size()))
            << "matrix " << i << ", " << threads << " threads, " << n_tok << " tokens";
      for (int i = 0; i < 3; ++i) y[i].assign(alone[i].size(), NAN);
      matmul_multi({{ws[0], y[0].data(), ws[0]->n_rows},
                    {ws[1], y[1].data(), ws[1]->n_rows},
                    {ws[2], y[2].data(), ws[2]->n_rows}},
                   x.data(), cols, n_tok, cols, pool, s);
      for (int i = 0; i < 3; ++i)
        EXPECT_EQ(0, std::memcmp(y[i].data(), alone[i].data(), sizeof(float) * y[i].size()))
            << "three types: matrix " << i << ", " << threads << " threads, " << n_tok << " tokens";
    }
  }
}

TEST(Matmul, F32IsExactDotProduct) {
  // 2x3 weight, known values.
  float wv[6] = {1, 2, 3, -1, 0.5f, 4};
  WeightMatrix w{GgmlType::F32, reinterpret_cast<const uint8_t*>(wv), 3, 2, 12};
  float x[6] = {1, 1, 1, 2, -1, 0.5f};
  float y[4];
  ThreadPool pool(2);
  MatmulScratch s;
  matmul(w, x, 3, 2, y, 2, pool, s);
  EXPECT_FLOAT_EQ(y[0], 6);
  EXPECT_FLOAT_EQ(y[1], 3.5f);
  EXPECT_FLOAT_EQ(y[2], 1.5f);
  EXPECT_FLOAT_EQ(y[3], -2.5f + 2);
}

TEST(Matmul, SupportsKnownTypes) {
  EXPECT_TRUE(matmul_supports(GgmlType::Q8_0));
  EXPECT_TRUE(matmul_supports(GgmlType::Q4_K));
  EXPECT_FALSE(matmul_supports(GgmlType::I32));
}

}  // namespace
}  // namespace mla
