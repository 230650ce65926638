// Dot products. Two checks per weight type:
//  - the reference equals sum(dequant(w) * dequant(a)) computed in double from the (gguf-py
//    verified) dequantizers, to within 1e-6 of sum|w*a| (it only rounds per-block scales; IQ6_K
//    2e-3, see below);
//  - each SIMD kernel equals the reference to within 2e-5 of sum|w*a| (float accumulation over
//    at most a few hundred blocks, per-block scale products and int32→float conversion each
//    round at 2^-24 relative).
// Data: random blocks with random, zero, tiny (fp16 subnormal) and huge (65504) scales,
// all-zero and all-one quant bits, activations of magnitude 1e-20..1e12, all-zero activations,
// and activations at ±max (quantized to ±127).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "quant/quant.h"
#include "quant_test_util.h"

namespace mla {
namespace {

struct Reference {
  double exact;      // sum of dequantized products, in double
  double magnitude;  // sum of |products|
};

Reference dequantized_dot(GgmlType wt, const std::vector<uint8_t>& w, const std::vector<uint8_t>& a, int64_t n) {
  const auto wf = testing::dequantized(wt, w.data(), n);
  const auto af = testing::dequantized(vec_dot_type(wt), a.data(), n);
  Reference r{0, 0};
  for (int64_t i = 0; i < n; ++i) {
    const double p = static_cast<double>(wf[i]) * af[i];
    r.exact += p;
    r.magnitude += std::fabs(p);
  }
  return r;
}

std::vector<GgmlType> dot_types(QuantIsa isa = QuantIsa::Ref) {
  std::vector<GgmlType> out;
  int count = 0;
  const GgmlType* all = ggml_all_types(&count);
  for (int i = 0; i < count; ++i)
    if (find_vec_dot(all[i], isa)) out.push_back(all[i]);
  return out;
}

// Runs `check(w, a, n, label)` over the data matrix described at the top of the file.
template <typename Check>
void for_each_case(GgmlType wt, Check check) {
  std::mt19937 rng(static_cast<uint32_t>(wt) * 7919u + 1);
  const int64_t block = std::max<int64_t>(ggml_traits(wt).block_elems, ggml_traits(vec_dot_type(wt)).block_elems);
  for (int64_t n : {block, 3 * block, int64_t{4096} + (block == 1 ? 7 : 0)}) {
    for (auto sc : testing::kAllScaleCases) {
      for (auto bits : {testing::BitsCase::Random, testing::BitsCase::AllZero, testing::BitsCase::AllOnes}) {
        if (sc != testing::ScaleCase::Random && bits != testing::BitsCase::Random) continue;
        const auto w = testing::random_row(wt, n, rng, sc, bits);
        // Keep products finite: huge weights meet moderate activations.
        // Activations stay within what their format holds: F16 values and the fp16 scale of
        // Q8_0 (max|x|/127) must not overflow; the small ones reach fp16 subnormals there.
        const GgmlType at = vec_dot_type(wt);
        const float big = at == GgmlType::F16              ? 1000.0f
                          : at == GgmlType::Q8_0           ? 5e5f
                          : sc == testing::ScaleCase::Huge ? 1e6f
                                                           : 1e12f;
        const float small = at == GgmlType::F16 ? 1e-6f : at == GgmlType::Q8_0 ? 1e-4f : 1e-20f;
        for (float amag : {1.0f, small, big, 0.0f}) {
          for (bool extremes : {false, true}) {
            const auto af = testing::random_floats(n, rng, amag, extremes);
            const auto a = testing::quantized(vec_dot_type(wt), af);
            std::string label = std::string(ggml_type_name(wt)) + " n=" + std::to_string(n) +
                                " scales=" + testing::scale_case_name(sc) +
                                " bits=" + std::to_string(static_cast<int>(bits)) + " act=" + std::to_string(amag) +
                                (extremes ? " extremes" : "");
            check(w, a, n, label);
          }
        }
      }
    }
  }
}

class DotTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(DotTest, ReferenceMatchesDequantizedProducts) {
  const GgmlType wt = GetParam();
  for_each_case(wt,
                [&](const std::vector<uint8_t>& w, const std::vector<uint8_t>& a, int64_t n, const std::string& label) {
                  const Reference r = dequantized_dot(wt, w, a, n);
                  const float got = vec_dot_ref(wt, n, w.data(), a.data());
                  // IQ6_K's dots use ik_llama.cpp's level table, its dequantization ik's cubic, which
                  // differs from the table by less than half a level (iqk_blocks.h).
                  const double tol = wt == GgmlType::IQ6_K ? 2e-3 : 1e-6;
                  ASSERT_LE(std::fabs(got - r.exact), tol * r.magnitude + 1e-37) << label << " want " << r.exact;
                });
}

// Over the types that have an AVX2 kernel (none when the CPU lacks AVX2+FMA+F16C).
class DotSimdTest : public ::testing::TestWithParam<GgmlType> {};
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(DotSimdTest);

TEST_P(DotSimdTest, MatchesReference) {
  const GgmlType wt = GetParam();
  VecDotFn simd = find_vec_dot(wt, QuantIsa::Avx2);
  for_each_case(
      wt, [&](const std::vector<uint8_t>& w, const std::vector<uint8_t>& a, int64_t n, const std::string& label) {
        const Reference r = dequantized_dot(wt, w, a, n);
        const float want = vec_dot_ref(wt, n, w.data(), a.data());
        const float got = simd(n, w.data(), a.data());
        ASSERT_LE(std::fabs(got - want), 2e-5 * r.magnitude + 1e-37) << label << " ref " << want << " simd " << got;
      });
}

// The four-row kernels must give, bit for bit, what the single-row kernel gives for each row:
// matmul mixes them by batch size, and batch invariance rests on it.
TEST_P(DotSimdTest, FourRowKernelIsBitIdenticalToSingleRow) {
  const GgmlType wt = GetParam();
  VecDot4Fn four = vec_dot4_fn(wt);
  if (!four) GTEST_SKIP() << ggml_type_name(wt) << " has no four-row kernel";
  const VecDotFn one = vec_dot_fn(wt);
  const GgmlType at = vec_dot_type(wt);
  std::mt19937 rng(static_cast<uint32_t>(wt) + 17);
  for (int64_t n : {ggml_traits(wt).block_elems, int64_t{96}, int64_t{4096}}) {
    if (n % ggml_traits(wt).block_elems != 0) continue;
    const auto w = testing::random_row(wt, n, rng, testing::ScaleCase::Random);
    const int64_t row_bytes = ggml_row_bytes(at, n);
    std::vector<uint8_t> acts;
    for (int t = 0; t < 4; ++t) {
      const auto a = testing::quantized(at, testing::random_floats(n, rng, t == 3 ? 1e-3f : 1.0f, t == 2));
      acts.insert(acts.end(), a.begin(), a.end());
    }
    float got[4];
    four(n, w.data(), acts.data(), row_bytes, got);
    for (int t = 0; t < 4; ++t) {
      const float want = one(n, w.data(), acts.data() + t * row_bytes);
      EXPECT_EQ(std::bit_cast<uint32_t>(got[t]), std::bit_cast<uint32_t>(want))
          << ggml_type_name(wt) << " n=" << n << " row " << t << ": " << got[t] << " vs " << want;
    }
  }
}

TEST(Dot, FourRowKernelsExistWhereExpected) {
  if (!quant_isa_available(QuantIsa::Avx2)) GTEST_SKIP() << "no AVX2 on this CPU";
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::IQ4_NL, GgmlType::MXFP4, GgmlType::Q4_K, GgmlType::Q5_K,
                     GgmlType::Q6_K})
    EXPECT_NE(vec_dot4_fn(t), nullptr) << ggml_type_name(t);
  EXPECT_EQ(vec_dot4_fn(GgmlType::F32), nullptr);
}

TEST_P(DotTest, DispatchedEqualsChosenKernel) {
  const GgmlType wt = GetParam();
  std::mt19937 rng(9);
  const int64_t n = 1024;
  const auto w = testing::random_row(wt, n, rng, testing::ScaleCase::Random);
  const auto a = testing::quantized(vec_dot_type(wt), testing::random_floats(n, rng, 1.0f));
  VecDotFn best = find_vec_dot(wt, QuantIsa::Avx2);
  if (!best) best = find_vec_dot(wt, QuantIsa::Ref);
  EXPECT_EQ(vec_dot(wt, n, w.data(), a.data()), best(n, w.data(), a.data()));
  EXPECT_EQ(vec_dot_fn(wt), best);
}

INSTANTIATE_TEST_SUITE_P(Quant, DotTest, ::testing::ValuesIn(dot_types()),
                         [](const auto& info) { return std::string(ggml_type_name(info.param)); });
INSTANTIATE_TEST_SUITE_P(Avx2, DotSimdTest, ::testing::ValuesIn(dot_types(QuantIsa::Avx2)),
                         [](const auto& info) { return std::string(ggml_type_name(info.param)); });

TEST(Dot, VecDotTypes) {
  EXPECT_EQ(vec_dot_type(GgmlType::Q4_K), GgmlType::Q8_K);
  EXPECT_EQ(vec_dot_type(GgmlType::Q6_K), GgmlType::Q8_K);
  EXPECT_EQ(vec_dot_type(GgmlType::IQ4_XS), GgmlType::Q8_K);
  EXPECT_EQ(vec_dot_type(GgmlType::Q4_0), GgmlType::Q8_0);
  EXPECT_EQ(vec_dot_type(GgmlType::IQ4_NL), GgmlType::Q8_0);
  EXPECT_EQ(vec_dot_type(GgmlType::MXFP4), GgmlType::Q8_0);
  EXPECT_EQ(vec_dot_type(GgmlType::BF16), GgmlType::BF16);
  EXPECT_EQ(vec_dot_type(GgmlType::F16), GgmlType::F16);
  EXPECT_EQ(vec_dot_type(GgmlType::F32), GgmlType::F32);
}

TEST(Dot, RequiredSimdKernelsExist) {
  if (!quant_isa_available(QuantIsa::Avx2)) GTEST_SKIP() << "CPU without AVX2+FMA+F16C";
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::IQ4_XS,
                     GgmlType::BF16, GgmlType::F16})
    EXPECT_NE(find_vec_dot(t, QuantIsa::Avx2), nullptr) << ggml_type_name(t);
}

// End to end on float data: quantize weights and activations, the dot approximates the float
// dot product within the quantization noise (a sanity check of formats and pairing).
TEST(Dot, ApproximatesFloatDot) {
  std::mt19937 rng(13);
  const int64_t n = 4096;
  const auto wf = testing::random_floats(n, rng, 1.0f);
  auto af = testing::random_floats(n, rng, 1.0f);
  for (int64_t i = 0; i < n; ++i) af[i] += 0.5f * wf[i];  // correlated, so the dot is large
  double exact = 0;
  for (int64_t i = 0; i < n; ++i) exact += static_cast<double>(wf[i]) * af[i];
  for (GgmlType wt : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K,
                      GgmlType::Q5_K, GgmlType::Q6_K}) {
    const auto w = testing::quantized(wt, wf);
    const auto a = testing::quantized(vec_dot_type(wt), af);
    const float got = vec_dot(wt, n, w.data(), a.data());
    EXPECT_NEAR(got, exact, 0.05 * std::fabs(exact)) << ggml_type_name(wt);
  }
}

}  // namespace
}  // namespace mla
