// Packed 16-row weight groups (quant/packed.h). Checks per packed type:
//  - the scalar twin packed_gemm_ref equals sum(dequant(w) * dequant(a)) in double from the
//    gguf-py-verified dequantizers, to within 2e-5 of sum|w*a| (it rounds per-block scale
//    products and accumulates in float, like the SIMD dot kernels), for every row and token
//    (IQ6_K: 1e-2, its dequantization not using the level table its products use), and the
//    row-major reference dot product of the same rows to within 2e-5;
//  - the selected SIMD kernel (AVX-512 or AVX2 family) and the AVX2 kernel itself give the same
//    bits as the twin, and a token's bits do not depend on how many tokens share the call (batch
//    invariance), for 1..8 tokens;
// on random raw blocks (all 6-bit scales and mins, q = -128 for Q8_0) with random, zero, tiny
// and huge fp16 scales, and activations of several magnitudes including ±max, for odd block
// counts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "../support/packed_kernels.h"
#include "quant/kernels.h"
#include "quant/packed.h"
#include "quant/quant.h"
#include "quant_test_util.h"

namespace mla {
namespace {

struct Case {
  std::vector<uint8_t> rows;   // 16 weight rows, ggml layout
  std::vector<uint8_t> group;  // the same rows packed
  std::vector<uint8_t> act;    // kPackedMaxTokens activation rows with their extras
  int64_t act_stride = 0;
  int64_t n = 0;
  std::string label;
};

Case make_case(GgmlType wt, int64_t n, testing::ScaleCase sc, float amag, bool extremes, std::mt19937& rng) {
  Case c;
  c.n = n;
  const int64_t rb = ggml_row_bytes(wt, n);
  for (int r = 0; r < kPackedRows; ++r) {
    const auto row = testing::random_row(wt, n, rng, sc);
    c.rows.insert(c.rows.end(), row.begin(), row.end());
  }
  c.group.resize(static_cast<size_t>(packed_group_bytes(wt, n)));
  pack_rows(wt, c.rows.data(), rb, n, c.group.data());
  const GgmlType at = vec_dot_type(wt);
  const int64_t qb = ggml_row_bytes(at, n);
  c.act_stride = qb + packed_act_extra_bytes(at, n) + 8;  // a gap, so the stride is honoured
  c.act.assign(static_cast<size_t>(c.act_stride * kPackedMaxTokens), 0xA5);
  for (int t = 0; t < kPackedMaxTokens; ++t) {
    const auto a = testing::quantized(at, testing::random_floats(n, rng, amag, extremes));
    uint8_t* dst = c.act.data() + t * c.act_stride;
    std::memcpy(dst, a.data(), a.size());
    packed_act_extra(at, dst, n, dst + qb);
  }
  c.label = std::string(ggml_type_name(wt)) + " n=" + std::to_string(n) + " scales=" + testing::scale_case_name(sc) +
            " act=" + std::to_string(amag) + (extremes ? " extremes" : "");
  return c;
}

template <typename Check>
void for_each_case(GgmlType wt, Check check) {
  std::mt19937 rng(static_cast<uint32_t>(wt) * 31u + 5);
  const int64_t block = ggml_traits(wt).block_elems;
  for (int64_t n : {block, 3 * block, 7 * block}) {
    for (auto sc : testing::kAllScaleCases) {
      const float big = vec_dot_type(wt) == GgmlType::Q8_0 ? 5e5f : sc == testing::ScaleCase::Huge ? 1e6f : 1e12f;
      for (float amag : {1.0f, 1e-4f, big, 0.0f})
        for (bool extremes : {false, true}) check(make_case(wt, n, sc, amag, extremes, rng));
    }
  }
}

bool same_bits(float a, float b) { return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, 4) == 0; }

class PackedTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(PackedTest, ReferenceMatchesDequantizedProducts) {
  const GgmlType wt = GetParam();
  const GgmlType at = vec_dot_type(wt);
  PackedGemmFn ref = packed_gemm_ref_fn(wt);
  ASSERT_NE(ref, nullptr);
  // IQ6_K's products use ik_llama.cpp's level table and its dequantization ik's cubic, which differ
  // by under half a level: relative to sum|w*a| that is unbounded where levels are small, so here
  // only a layout check (a wrong index is off by several levels); ReferenceMatchesRowDotReference
  // holds IQ6_K's twin to 2e-5 of the row reference, which uses the same table.
  const double tol = wt == GgmlType::IQ6_K ? 1e-2 : 2e-5;
  for_each_case(wt, [&](const Case& c) {
    float out[kPackedMaxTokens * kPackedRows];
    ref(c.n, c.group.data(), c.act.data(), c.act_stride, kPackedMaxTokens, out);
    const int64_t rb = ggml_row_bytes(wt, c.n);
    for (int t = 0; t < kPackedMaxTokens; ++t) {
      const auto af = testing::dequantized(at, c.act.data() + t * c.act_stride, c.n);
      for (int r = 0; r < kPackedRows; ++r) {
        const auto wf = testing::dequantized(wt, c.rows.data() + r * rb, c.n);
        double exact = 0, magnitude = 0;
        for (int64_t i = 0; i < c.n; ++i) {
          const double p = static_cast<double>(wf[i]) * af[i];
          exact += p;
          magnitude += std::fabs(p);
        }
        ASSERT_LE(std::fabs(out[t * kPackedRows + r] - exact), tol * magnitude + 1e-37)
            << c.label << " row " << r << " token " << t << " want " << exact;
      }
    }
  });
}

// The twin against the row-major reference dot product of the same rows (vec_dot_ref), which
// shares the levels but not the layout or the float steps: within 2e-5 of sum|w*a| for every type,
// IQ6_K included (its level table is what both use).
TEST_P(PackedTest, ReferenceMatchesRowDotReference) {
  const GgmlType wt = GetParam();
  const GgmlType at = vec_dot_type(wt);
  PackedGemmFn ref = packed_gemm_ref_fn(wt);
  for_each_case(wt, [&](const Case& c) {
    float out[kPackedMaxTokens * kPackedRows];
    ref(c.n, c.group.data(), c.act.data(), c.act_stride, kPackedMaxTokens, out);
    const int64_t rb = ggml_row_bytes(wt, c.n);
    for (int t = 0; t < kPackedMaxTokens; ++t) {
      const uint8_t* a = c.act.data() + t * c.act_stride;
      const auto af = testing::dequantized(at, a, c.n);
      for (int r = 0; r < kPackedRows; ++r) {
        const auto wf = testing::dequantized(wt, c.rows.data() + r * rb, c.n);
        double magnitude = 0;
        for (int64_t i = 0; i < c.n; ++i) magnitude += std::fabs(static_cast<double>(wf[i]) * af[i]);
        const float want = vec_dot_ref(wt, c.n, c.rows.data() + r * rb, a);
        ASSERT_LE(std::fabs(out[t * kPackedRows + r] - want), 2e-5 * magnitude + 1e-37)
            << c.label << " row " << r << " token " << t << " want " << want;
      }
    }
  });
}

// simd gives the twin's bits for every token count and offset of the tile.
void expect_reference_bits(GgmlType wt, PackedGemmFn simd) {
  PackedGemmFn ref = packed_gemm_ref_fn(wt);
  for_each_case(wt, [&](const Case& c) {
    float want[kPackedMaxTokens * kPackedRows];
    ref(c.n, c.group.data(), c.act.data(), c.act_stride, kPackedMaxTokens, want);
    for (int nt = 1; nt <= kPackedMaxTokens; ++nt) {
      for (int first = 0; first + nt <= kPackedMaxTokens; first += nt) {
        float got[kPackedMaxTokens * kPackedRows];
        simd(c.n, c.group.data(), c.act.data() + first * c.act_stride, c.act_stride, nt, got);
        for (int i = 0; i < nt * kPackedRows; ++i)
          ASSERT_TRUE(same_bits(got[i], want[first * kPackedRows + i]))
              << c.label << " tokens " << first << "+" << nt << " index " << i << ": " << got[i] << " vs "
              << want[first * kPackedRows + i];
      }
    }
  });
}

// The kernel this process selected (AVX-512 or AVX2 family, packed_gemm_fn).
TEST_P(PackedTest, SimdEqualsReferenceBitsForEveryTokenCount) {
  const GgmlType wt = GetParam();
  PackedGemmFn simd = packed_gemm_fn(wt);
  if (!simd) GTEST_SKIP() << packed_kernels_unavailable_reason(wt);
  expect_reference_bits(wt, simd);
}

// The AVX2 family's kernel itself, on any AVX2 host and whatever packed_gemm_fn selected (an
// AVX-512 host selects the AVX-512 kernel; the AVX2 family may keep row dot products for a type).
TEST_P(PackedTest, Avx2KernelEqualsReferenceBits) {
  const GgmlType wt = GetParam();
  if (!quant::cpu_has_avx2_fma())
    GTEST_SKIP() << "AVX2 packed GEMM kernel NOT TESTED for " << ggml_type_name(wt)
                 << ": the CPU lacks avx2/fma/f16c, or the scalar family is chosen";
  PackedGemmFn avx2 = quant::packed_gemm_avx2_fn(wt);
  if (!avx2)
    GTEST_SKIP() << "AVX2 packed GEMM kernel NOT TESTED for " << ggml_type_name(wt)
                 << ": the AVX2 family has no kernel for this layout (row dot products run it)";
  expect_reference_bits(wt, avx2);
}

TEST(Packed, LayoutsAndExtras) {
  EXPECT_TRUE(packed_layout_exists(GgmlType::Q8_0));
  EXPECT_TRUE(packed_layout_exists(GgmlType::Q4_K));
  EXPECT_TRUE(packed_layout_exists(GgmlType::Q6_K));
  EXPECT_TRUE(packed_layout_exists(GgmlType::Q5_K));
  EXPECT_TRUE(packed_layout_exists(GgmlType::IQ2_XXS));
  EXPECT_TRUE(packed_layout_exists(GgmlType::IQ1_M));
  EXPECT_FALSE(packed_layout_exists(GgmlType::Q4_1));
  EXPECT_EQ(packed_gemm_ref_fn(GgmlType::Q4_1), nullptr);
  EXPECT_EQ(packed_gemm_fn(GgmlType::Q4_1), nullptr);
  // The AVX2 family covers these layouts (so Avx2KernelEqualsReferenceBits skips none of them).
  for (GgmlType t :
       {GgmlType::Q8_0,    GgmlType::Q2_K,   GgmlType::Q3_K,   GgmlType::Q4_K,    GgmlType::Q5_K,    GgmlType::Q6_K,
        GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S,  GgmlType::IQ3_XXS, GgmlType::IQ3_S,   GgmlType::IQ1_S,
        GgmlType::IQ1_M,   GgmlType::Q4_0,   GgmlType::Q5_0,   GgmlType::IQ4_NL,  GgmlType::MXFP4,   GgmlType::IQ4_XS,
        GgmlType::Q6_0,    GgmlType::IQ4_K,  GgmlType::IQ5_K,  GgmlType::IQ4_KS,  GgmlType::IQ5_KS,  GgmlType::IQ2_KL,
        GgmlType::IQ2_K,   GgmlType::IQ3_K,  GgmlType::IQ2_KS, GgmlType::IQ3_KS,  GgmlType::IQ4_KSS, GgmlType::IQ6_K})
    EXPECT_NE(quant::packed_gemm_avx2_fn(t), nullptr) << ggml_type_name(t);
  // 16 rows of Q8_0 are 16 x 34 bytes per block; the packed group keeps that size.
  EXPECT_EQ(packed_group_bytes(GgmlType::Q8_0, 64), 2 * 16 * 34);
  EXPECT_EQ(packed_group_bytes(GgmlType::Q4_K, 512), 2 * (16 * 144 + 64));
  EXPECT_EQ(packed_group_bytes(GgmlType::Q6_K, 512), 2 * 16 * 210);
  // Q5_K: 16 x 176 bytes per super-block plus the 64 bytes of unpacked scales, as Q4_K.
  EXPECT_EQ(packed_group_bytes(GgmlType::Q5_K, 512), 2 * (16 * 176 + 64));
  // IQ2_XXS: 16 x 66 bytes, plus 8 x 16 scale bytes and 32 x 16 expanded sign bytes, less the
  // 16 x 32 sign-and-scale words the rows store.
  EXPECT_EQ(packed_group_bytes(GgmlType::IQ2_XXS, 256), 16 * 66 + 128 + 512 - 16 * 32);
  // IQ1_S: fp16 d x 16, a scale byte per 32 columns and row, the 11-bit grid indices widened to 16
  // bits, and one shift bit per group of 8 columns and row.
  EXPECT_EQ(packed_group_bytes(GgmlType::IQ1_S, 512), 2 * (32 + 8 * 16 + 32 * 16 * 2 + 32 * 16 / 8));
  EXPECT_EQ(packed_group_bytes(GgmlType::IQ1_M, 256), 32 + 16 * 16 + 32 * 16 * 2 + 32 * 16 / 8);
  // Q6_0 and the row-scaled IQ4_KS / IQ5_KS keep the rows' bytes (fp32 headers included);
  // IQ4_K / IQ5_K add 64 bytes per super-block: the 6-bit scales as bytes and the extra bits.
  EXPECT_EQ(packed_group_bytes(GgmlType::Q6_0, 64), 2 * 16 * 26);
  EXPECT_EQ(packed_group_bytes(GgmlType::IQ4_KS, 512), 16 * (4 + 2 * 136));
  EXPECT_EQ(packed_group_bytes(GgmlType::IQ5_KS, 512), 16 * (4 + 2 * 168));
  // IQ6_K keeps its rows' bytes exactly.
  EXPECT_EQ(packed_group_bytes(GgmlType::IQ6_K, 512), 2 * 16 * 212);
  // IQ4_KSS is packed as IQ4_KS: 8 more bytes per row and super-block (its scale bits as bytes).
  EXPECT_EQ(packed_group_bytes(GgmlType::IQ4_KSS, 512), 16 * (4 + 2 * (128 + 8)));
  EXPECT_EQ(packed_group_bytes(GgmlType::IQ4_K, 512), 2 * (16 * 144 + 64));
  EXPECT_EQ(packed_group_bytes(GgmlType::IQ5_K, 512), 2 * (16 * 176 + 64));
  // IQ2_KL: its rows' bytes, plus the 6-bit scales as bytes (32 more per super-block) and 32 bytes
  // of padding after the fp16 row scales.
  EXPECT_EQ(packed_group_bytes(GgmlType::IQ2_KL, 512), 16 * (2 + 2 * 86) + 2 * 32 + 32);
  // The 2- and 3-bit types: their rows' bytes plus the scales as bytes (IQ2_K 128, IQ3_K 96,
  // IQ2_KS and IQ3_KS 32 more per super-block) and, row-scaled, 32 bytes of padding.
  EXPECT_EQ(packed_group_bytes(GgmlType::IQ2_K, 512), 2 * (16 * 76 + 128));
  EXPECT_EQ(packed_group_bytes(GgmlType::IQ3_K, 512), 2 * (16 * 110 + 96));
  EXPECT_EQ(packed_group_bytes(GgmlType::IQ2_KS, 512), 16 * (2 + 2 * 70) + 2 * 32 + 32);
  EXPECT_EQ(packed_group_bytes(GgmlType::IQ3_KS, 512), 16 * (2 + 2 * 102) + 2 * 32 + 32);
  EXPECT_EQ(packed_act_extra_bytes(GgmlType::Q8_0, 64), 8);
  // Q8_K: per super-block 8 int16 pair sums, 16 int32 -32 x sums of 16, 16 int32 -128 x them.
  EXPECT_EQ(packed_act_extra_bytes(GgmlType::Q8_K, 512), 2 * (16 + 64 + 64));
  EXPECT_EQ(packed_act_extra_bytes(GgmlType::F16, 512), 0);
}

INSTANTIATE_TEST_SUITE_P(Quant, PackedTest,
                         ::testing::Values(GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K,
                                           GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ2_XXS, GgmlType::IQ2_XS,
                                           GgmlType::IQ2_S, GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::IQ1_S,
                                           GgmlType::IQ1_M, GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::IQ4_NL,
                                           GgmlType::MXFP4, GgmlType::IQ4_XS, GgmlType::Q6_0, GgmlType::IQ4_K,
                                           GgmlType::IQ5_K, GgmlType::IQ4_KS, GgmlType::IQ5_KS, GgmlType::IQ2_KL,
                                           GgmlType::IQ2_K, GgmlType::IQ3_K, GgmlType::IQ2_KS, GgmlType::IQ3_KS,
                                           GgmlType::IQ4_KSS, GgmlType::IQ6_K),
                         [](const auto& info) { return testing::type_label(info.param); });

}  // namespace
}  // namespace mla
