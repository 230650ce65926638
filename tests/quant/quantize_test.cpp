// Quantize → dequantize error bounds. Bounds for the fixed-grid formats follow from their
// definitions; the K-quants, whose scales are searched, must beat a naive min/max quantizer
// with exact float scales that this test implements itself. Bit-exactness of F16/BF16/Q8_0/
// Q4_0 quantization against gguf-py is checked in tests/py/test_gguf_py_roundtrip.py, and
// RMSE against llama.cpp in tools/quant-compare (docs/PERF.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "quant/quant.h"
#include "quant_test_util.h"

namespace mla {
namespace {

double rmse(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
  return std::sqrt(s / a.size());
}

std::vector<float> roundtrip(GgmlType t, const std::vector<float>& x) {
  const auto q = testing::quantized(t, x);
  return testing::dequantized(t, q.data(), static_cast<int64_t>(x.size()));
}

// Student-t with 3 degrees of freedom: heavy tails, like real weight outliers.
std::vector<float> student_t3(int64_t n, std::mt19937& rng) {
  std::student_t_distribution<float> dist(3.0f);
  std::vector<float> f(n);
  for (auto& v : f) v = dist(rng);
  return f;
}

// Naive affine 2^bits-level quantization per `group` elements with exact float scale and
// offset: the baseline a scale search must beat.
double naive_affine_rmse(const std::vector<float>& x, int group, int levels) {
  double s = 0;
  for (size_t g = 0; g < x.size(); g += group) {
    const float lo = *std::min_element(x.begin() + g, x.begin() + g + group);
    const float hi = *std::max_element(x.begin() + g, x.begin() + g + group);
    const float d = (hi - lo) / (levels - 1);
    for (int i = 0; i < group; ++i) {
      const float v = x[g + i];
      const float r = d > 0 ? lo + d * std::round((v - lo) / d) : lo;
      s += (static_cast<double>(v) - r) * (static_cast<double>(v) - r);
    }
  }
  return std::sqrt(s / x.size());
}
// Naive symmetric quantization to levels -half..half-1 per group, scale amax/half.
double naive_symmetric_rmse(const std::vector<float>& x, int group, int half) {
  double s = 0;
  for (size_t g = 0; g < x.size(); g += group) {
    float amax = 0;
    for (int i = 0; i < group; ++i) amax = std::max(amax, std::fabs(x[g + i]));
    const float d = amax / half;
    for (int i = 0; i < group; ++i) {
      const float v = x[g + i];
      const float r = d > 0 ? d * std::clamp(std::round(v / d), -static_cast<float>(half), half - 1.0f) : 0;
      s += (static_cast<double>(v) - r) * (static_cast<double>(v) - r);
    }
  }
  return std::sqrt(s / x.size());
}

TEST(Quantize, Q8_0ElementErrorWithinHalfStep) {
  std::mt19937 rng(1);
  for (float scale : {1.0f, 1e-3f, 300.0f}) {
    const auto x = testing::random_floats(4096, rng, scale);
    const auto y = roundtrip(GgmlType::Q8_0, x);
    for (size_t b = 0; b < x.size(); b += 32) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b + j]));
      // Half a step, plus 127 levels times the fp16 rounding of the scale: relative 2^-11,
      // or absolute 2^-25 where the scale is an fp16 subnormal (below 2^-14).
      const float d = amax / 127;
      const float d_err = std::max(d * std::ldexp(1.0f, -11), std::ldexp(1.0f, -25));
      const float bound = (0.5f * d + 127 * d_err) * 1.001f;
      for (int j = 0; j < 32; ++j) ASSERT_LE(std::fabs(x[b + j] - y[b + j]), bound) << b + j;
    }
  }
}

TEST(Quantize, Q4_0ElementErrorWithinOneStep) {
  std::mt19937 rng(2);
  const auto x = testing::random_floats(4096, rng, 1.0f);
  const auto y = roundtrip(GgmlType::Q4_0, x);
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b + j]));
    // The value of largest magnitude maps to level -8 exactly; the other sign can reach +8,
    // which is clamped to +7: an error of up to one step.
    const float bound = amax / 8 * (1.0f + 8 * std::ldexp(1.0f, -11)) * 1.001f;
    for (int j = 0; j < 32; ++j) ASSERT_LE(std::fabs(x[b + j] - y[b + j]), bound) << b + j;
  }
}

TEST(Quantize, Q8_KMatchesDefinition) {
  std::mt19937 rng(3);
  const auto x = testing::random_floats(1024, rng, 2.0f);
  const auto q = testing::quantized(GgmlType::Q8_K, x);
  for (int b = 0; b < 4; ++b) {
    const uint8_t* blk = q.data() + 292 * b;
    float d;
    std::memcpy(&d, blk, 4);
    const auto* qs = reinterpret_cast<const int8_t*>(blk + 4);
    int16_t bsums[16];
    std::memcpy(bsums, blk + 260, 32);
    float amax = 0;
    for (int j = 0; j < 256; ++j) amax = std::max(amax, std::fabs(x[256 * b + j]));
    EXPECT_NEAR(std::fabs(d), amax / 127, amax / 127 * 1e-6);
    for (int j = 0; j < 256; ++j) {
      ASSERT_GE(qs[j], -127);
      ASSERT_LE(std::fabs(d * qs[j] - x[256 * b + j]), std::fabs(d) * 0.5001f);
    }
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += qs[16 * g + j];
      EXPECT_EQ(bsums[g], sum);
    }
  }
}

TEST(Quantize, ZeroRowsStayZero) {
  for (GgmlType t :
       {GgmlType::F16,    GgmlType::BF16,   GgmlType::Q8_0,    GgmlType::Q4_0,  GgmlType::Q5_0,  GgmlType::Q5_1,
        GgmlType::Q2_K,   GgmlType::Q3_K,   GgmlType::Q4_K,    GgmlType::Q5_K,  GgmlType::Q6_K,  GgmlType::Q8_K,
        GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4,   GgmlType::IQ1_S, GgmlType::IQ1_M, GgmlType::IQ2_XXS,
        GgmlType::IQ2_XS, GgmlType::IQ2_S,  GgmlType::IQ3_XXS, GgmlType::IQ3_S}) {
    const std::vector<float> x(512, 0.0f);
    const auto y = roundtrip(t, x);
    for (float v : y) ASSERT_EQ(v, 0.0f) << ggml_type_name(t);
  }
}

struct KCase {
  GgmlType type;
  bool symmetric;
  int group;
  int levels;  // affine: number of levels; symmetric: half range
};

class KQuantQuality : public ::testing::TestWithParam<KCase> {};

// The scale search must beat naive min/max (or max-abs) quantization with exact float scales,
// although the K-quant scales themselves are stored in 6 or 8 bits.
TEST_P(KQuantQuality, BeatsNaiveQuantizerOnGaussianAndHeavyTails) {
  const KCase c = GetParam();
  std::mt19937 rng(4);
  for (int dist = 0; dist < 2; ++dist) {
    const auto x = dist == 0 ? testing::random_floats(256 * 64, rng, 1.0f) : student_t3(256 * 64, rng);
    const double got = rmse(x, roundtrip(c.type, x));
    const double naive =
        c.symmetric ? naive_symmetric_rmse(x, c.group, c.levels) : naive_affine_rmse(x, c.group, c.levels);
    EXPECT_LT(got, naive) << ggml_type_name(c.type) << (dist == 0 ? " gaussian" : " student-t3");
    EXPECT_GT(got, 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Quant, KQuantQuality,
                         ::testing::Values(KCase{GgmlType::Q4_K, false, 32, 16}, KCase{GgmlType::Q5_K, false, 32, 32},
                                           KCase{GgmlType::Q6_K, true, 16, 32}),
                         [](const auto& info) { return std::string(ggml_type_name(info.param.type)); });

TEST(Quantize, KQuantsHandleScaleExtremes) {
  std::mt19937 rng(5);
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    // 1e-2 puts the super-block scales near the fp16 subnormal range (smaller data underflows
    // the fp16 scales to zero, a limit of the format).
    for (float scale : {1e-2f, 1e3f}) {
      const auto x = testing::random_floats(1024, rng, scale);
      const auto y = roundtrip(t, x);
      double sum_sq = 0;
      for (float v : x) sum_sq += static_cast<double>(v) * v;
      const double rel = rmse(x, y) / std::sqrt(sum_sq / x.size());
      EXPECT_LT(rel, 0.1) << ggml_type_name(t) << " scale " << scale;
    }
    // One outlier among zeros: the outlier survives to within its sub-block's step.
    std::vector<float> x(256, 0.0f);
    x[77] = -5.0f;
    const auto y = roundtrip(t, x);
    EXPECT_NEAR(y[77], -5.0f, 0.2f) << ggml_type_name(t);
    for (int i = 0; i < 256; ++i)
      if (i != 77) {
        EXPECT_NEAR(y[i], 0.0f, 0.2f) << ggml_type_name(t) << " element " << i;
      }
  }
}

// The low-bit types at data scales far from 1 (their fp16 scales near the subnormal range and
// large), and the lattice i-quants' sign handling: the value of largest magnitude in each group of
// 8 keeps its sign (a forced sign flip, when the format needs an even count, goes to a cheaper
// value).
TEST(Quantize, LowBitTypesHandleScalesAndSigns) {
  struct Case {
    GgmlType t;
    double max_rel;  // relative RMSE bound on Gaussian data, well above what the type reaches
    bool sign_grid;
  };
  std::mt19937 rng(6);
  for (const Case& c :
       {Case{GgmlType::Q2_K, 0.45, false}, Case{GgmlType::Q3_K, 0.25, false}, Case{GgmlType::IQ4_NL, 0.12, false},
        Case{GgmlType::IQ4_XS, 0.12, false}, Case{GgmlType::MXFP4, 0.2, false}, Case{GgmlType::IQ2_XXS, 0.45, true},
        Case{GgmlType::IQ2_XS, 0.4, true}, Case{GgmlType::IQ2_S, 0.35, true}, Case{GgmlType::IQ3_XXS, 0.25, true},
        Case{GgmlType::IQ3_S, 0.2, true}, Case{GgmlType::IQ1_S, 0.6, false}, Case{GgmlType::IQ1_M, 0.55, false}}) {
    for (float scale : {3e-2f, 1.0f, 1e3f}) {
      const auto x = testing::random_floats(4096, rng, scale);
      const auto y = roundtrip(c.t, x);
      double sum_sq = 0;
      for (float v : x) sum_sq += static_cast<double>(v) * v;
      const double rel = rmse(x, y) / std::sqrt(sum_sq / x.size());
      EXPECT_LT(rel, c.max_rel) << ggml_type_name(c.t) << " scale " << scale;
      if (!c.sign_grid) continue;
      int wrong = 0;
      for (size_t g = 0; g < x.size(); g += 8) {
        size_t top = g;
        for (size_t i = g; i < g + 8; ++i)
          if (std::fabs(x[i]) > std::fabs(x[top])) top = i;
        wrong += (x[top] < 0) != (y[top] < 0);
      }
      EXPECT_EQ(wrong, 0) << ggml_type_name(c.t) << " scale " << scale;
    }
  }
}

}  // namespace
}  // namespace mla

namespace mla {
namespace {

// SIMD activation quantizers must give the reference's bytes exactly (finite inputs): random
// rows at several magnitudes, zero blocks, ties between +amax and -amax (the first one sets the
// sign of Q8_K's scale), values on rounding ties, subnormal floats and the fp16 overflow edge.
TEST(Quantize, SimdMatchesReferenceBitExact) {
  if (!quant_isa_available(QuantIsa::Avx2)) GTEST_SKIP() << "CPU without AVX2+FMA+F16C";
  std::mt19937 rng(17);
  std::vector<std::vector<float>> rows;
  for (float scale : {1.0f, 1e-3f, 3e4f, 1e-30f}) rows.push_back(testing::random_floats(1024, rng, scale));
  rows.push_back(std::vector<float>(1024, 0.0f));
  {
    auto r = testing::random_floats(1024, rng, 1.0f);
    for (size_t b = 0; b < r.size(); b += 256) {
      r[b + 3] = 7.0f;     // +amax first ...
      r[b + 200] = -7.0f;  // ... then -amax
      r[b + 40] = -7.0f;   // (and in the next 32-block, -amax first)
      r[b + 45] = 7.0f;
    }
    rows.push_back(r);
  }
  {
    std::vector<float> r(1024);
    for (size_t i = 0; i < r.size(); ++i) r[i] = (static_cast<float>(i % 64) - 31.5f) * 0.5f;  // halves: rounding ties
    rows.push_back(r);
  }
  {
    std::vector<float> r(1024);
    for (size_t i = 0; i < r.size(); ++i)
      r[i] = (i % 2 ? -1.0f : 1.0f) * std::ldexp(1.0f + (i % 7) / 8.0f, -140 + static_cast<int>(i % 30));
    for (size_t i = 0; i < r.size(); i += 17) r[i] = (i % 3 ? 65519.0f : 65520.0f);
    rows.push_back(r);
  }
  for (GgmlType t : {GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q8_K}) {
    QuantizeFn simd = find_quantize(t, QuantIsa::Avx2);
    ASSERT_NE(simd, nullptr) << ggml_type_name(t);
    for (size_t r = 0; r < rows.size(); ++r) {
      const auto& x = rows[r];
      std::vector<uint8_t> want(ggml_row_bytes(t, 1024)), got(want.size());
      find_quantize(t, QuantIsa::Ref)(x.data(), want.data(), 1024);
      simd(x.data(), got.data(), 1024);
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_EQ(got[i], want[i]) << ggml_type_name(t) << " row " << r << " byte " << i;
    }
  }
}

TEST(Quantize, PlainTypesHandleOddLengthsInSimd) {
  std::mt19937 rng(19);
  const auto x = testing::random_floats(37, rng, 1.0f);
  for (GgmlType t : {GgmlType::F16, GgmlType::BF16}) {
    std::vector<uint8_t> want(ggml_row_bytes(t, 37)), got(want.size());
    find_quantize(t, QuantIsa::Ref)(x.data(), want.data(), 37);
    quantize_row(t, x.data(), got.data(), 37);
    EXPECT_EQ(got, want) << ggml_type_name(t);
  }
}

}  // namespace
}  // namespace mla
