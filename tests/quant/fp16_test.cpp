// fp16 / bf16 conversions against known IEEE bit patterns, and fp16 against the CPU's F16C
// instructions (an independent implementation) over every pattern and many random floats.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <limits>
#include <random>

#include "quant/quant.h"
#include "quant_test_util.h"

namespace mla {
namespace {

using testing::bits_of;
using testing::float_of;

struct HalfCase {
  uint32_t f32;
  uint16_t f16;
};

// Exact pairs: converting either way gives the other.
constexpr HalfCase kExactHalves[] = {
    {0x00000000, 0x0000},                        // +0
    {0x80000000, 0x8000},                        // -0
    {0x3F800000, 0x3C00},                        // 1
    {0xC0000000, 0xC000},                        // -2
    {0x477FE000, 0x7BFF},                        // 65504, largest finite
    {0x38800000, 0x0400},                        // 2^-14, smallest normal
    {0x387FC000, 0x03FF},                        // largest subnormal
    {0x33800000, 0x0001},                        // 2^-24, smallest subnormal
    {0xB3800000, 0x8001}, {0x7F800000, 0x7C00},  // +Inf
    {0xFF800000, 0xFC00},                        // -Inf
    {0x7FC00000, 0x7E00},                        // quiet NaN
    {0x3E2AA000, 0x3155},                        // 0.166626 (exactly representable)
};

TEST(Fp16, ExactPatternsBothWays) {
  for (const auto& c : kExactHalves) {
    EXPECT_EQ(bits_of(fp16_to_fp32(c.f16)), c.f32) << std::hex << c.f16;
    EXPECT_EQ(fp32_to_fp16(float_of(c.f32)), c.f16) << std::hex << c.f32;
  }
}

TEST(Fp16, RoundingToNearestEven) {
  EXPECT_EQ(fp32_to_fp16(0.1f), 0x2E66);
  EXPECT_EQ(fp32_to_fp16(65519.996f), 0x7BFF);  // just below the halfway point to 2^16
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);    // halfway, 65504's mantissa is odd: up to Inf
  EXPECT_EQ(fp32_to_fp16(1e10f), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(-1e10f), 0xFC00);
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // tie, even mantissa stays
  EXPECT_EQ(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie, odd mantissa rounds up
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);             // tie between 0 and 2^-24: even
  EXPECT_EQ(fp32_to_fp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(fp32_to_fp16(3 * std::ldexp(1.0f, -25)), 0x0002);  // 1.5 subnormal steps: even
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -30)), 0x0000);
  EXPECT_EQ(fp32_to_fp16(-std::ldexp(1.0f, -30)), 0x8000);
  EXPECT_EQ(fp32_to_fp16(float_of(0x387FF000)), 0x0400);  // largest subnormal + half step: up to normal
  EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::denorm_min()), 0x0000);
}

TEST(Fp16, NaNPayloads) {
  EXPECT_EQ(bits_of(fp16_to_fp32(0x7C01)), 0x7F802000u);  // signalling NaN kept as is
  EXPECT_EQ(bits_of(fp16_to_fp32(0xFE00)), 0xFFC00000u);
  EXPECT_EQ(fp32_to_fp16(float_of(0x7F800001)), 0x7E00);  // payload below fp16 precision: quiet NaN
  EXPECT_EQ(fp32_to_fp16(float_of(0xFFA02000)), 0xFF01 | 0x7E00);
  EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(std::nanf("")))));
}

// F16C is an independent (hardware) implementation of the same IEEE conversions.
__attribute__((target("f16c"))) float hw_half_to_float(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) uint16_t hw_float_to_half(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

TEST(Fp16, AllHalfPatternsMatchF16C) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "CPU without F16C";
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto hh = static_cast<uint16_t>(h);
    const bool signalling_nan = (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0 && (h & 0x200) == 0;
    uint32_t want = bits_of(hw_half_to_float(hh));
    if (signalling_nan) want &= ~0x00400000u;  // F16C quiets signalling NaNs; we keep them
    ASSERT_EQ(bits_of(fp16_to_fp32(hh)), want) << std::hex << h;
    if (!std::isnan(fp16_to_fp32(hh))) {
      ASSERT_EQ(fp32_to_fp16(fp16_to_fp32(hh)), hh) << std::hex << h;
    }
  }
}

TEST(Fp16, RandomFloatsMatchF16C) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "CPU without F16C";
  std::mt19937 rng(7);
  for (int i = 0; i < 2000000; ++i) {
    // Random bit patterns concentrated on the fp16 exponent range (including subnormals and
    // overflow), plus fully random patterns.
    uint32_t u = rng();
    if (i % 2 == 0) u = (u & 0x807FFFFF) | ((100 + rng() % 50) << 23);
    const float f = float_of(u);
    ASSERT_EQ(fp32_to_fp16(f), hw_float_to_half(f)) << std::hex << u;
  }
}

struct BfCase {
  uint32_t f32;
  uint16_t bf16;
};

TEST(Bf16, KnownPatterns) {
  constexpr BfCase kCases[] = {
      {0x3F800000, 0x3F80},                        // 1
      {0x3F808000, 0x3F80},                        // tie, even stays
      {0x3F818000, 0x3F82},                        // tie, odd rounds up
      {0x3F808001, 0x3F81},                        // above the tie
      {0x7F7FFFFF, 0x7F80},                        // FLT_MAX rounds to Inf
      {0x7F800000, 0x7F80},                        // Inf
      {0xFF800000, 0xFF80}, {0x7F800001, 0x7FC0},  // signalling NaN made quiet
      {0xFFC00001, 0xFFC0}, {0x00000001, 0x0000},  // smallest fp32 subnormal rounds to 0
      {0x00008000, 0x0000},                        // tie at a subnormal: even
      {0x00018000, 0x0002}, {0x80000000, 0x8000},
  };
  for (const auto& c : kCases) EXPECT_EQ(fp32_to_bf16(float_of(c.f32)), c.bf16) << std::hex << c.f32;
  for (uint32_t h = 0; h < 65536; ++h) {
    ASSERT_EQ(bits_of(bf16_to_fp32(static_cast<uint16_t>(h))), h << 16);
    const bool nan = (h & 0x7F80) == 0x7F80 && (h & 0x7F) != 0;
    if (!nan) {
      ASSERT_EQ(fp32_to_bf16(bf16_to_fp32(static_cast<uint16_t>(h))), h);
    }
  }
}

}  // namespace
}  // namespace mla
