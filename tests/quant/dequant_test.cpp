// Dequantization: hand-built blocks whose values follow from the format definitions, the
// "not supported yet" errors, and SIMD kernels against the reference (bit-exact). Bit-exactness
// with gguf-py over random blocks is checked by tests/py/test_gguf_py_roundtrip.py.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "quant/quant.h"
#include "quant_test_util.h"
#include "util/error.h"

namespace mla {
namespace {

using testing::bits_of;

template <typename... T>
std::vector<uint8_t> bytes(T... v) {
  return {static_cast<uint8_t>(v)...};
}

void put_u16(std::vector<uint8_t>& b, size_t off, uint16_t v) { std::memcpy(b.data() + off, &v, 2); }

TEST(Dequant, Q4_0HandBuilt) {
  std::vector<uint8_t> b(18, 0x88);  // every level 8 → 0
  put_u16(b, 0, 0x3800);             // d = 0.5
  b[2] = 0x1F;                       // element 0: 15-8 = 7, element 16: 1-8 = -7
  const auto y = testing::dequantized(GgmlType::Q4_0, b.data(), 32);
  EXPECT_EQ(y[0], 3.5f);
  EXPECT_EQ(y[16], -3.5f);
  EXPECT_EQ(y[1], 0.0f);
}

TEST(Dequant, Q5_1HandBuilt) {
  std::vector<uint8_t> b(24, 0);
  put_u16(b, 0, 0x3C00);  // d = 1
  put_u16(b, 2, 0xC000);  // m = -2
  b[4 + 2] = 0x01;        // qh bit 16 → element 16 gets +16
  b[8] = 0x3A;            // element 0: 0xA = 10, element 16: 3 | 16 = 19
  const auto y = testing::dequantized(GgmlType::Q5_1, b.data(), 32);
  EXPECT_EQ(y[0], 8.0f);
  EXPECT_EQ(y[16], 17.0f);
  EXPECT_EQ(y[31], -2.0f);
}

TEST(Dequant, Q8_0HandBuilt) {
  std::vector<uint8_t> b(34, 0);
  put_u16(b, 0, 0x3400);  // d = 0.25
  b[2] = 0x81;            // -127
  b[33] = 0x7F;           // 127
  const auto y = testing::dequantized(GgmlType::Q8_0, b.data(), 32);
  EXPECT_EQ(y[0], -31.75f);
  EXPECT_EQ(y[31], 31.75f);
}

TEST(Dequant, Q4_KHandBuilt) {
  std::vector<uint8_t> b(144, 0);
  put_u16(b, 0, 0x3C00);  // d = 1
  put_u16(b, 2, 0x3800);  // dmin = 0.5
  // Sub-block 0: scale 2, min 3. Sub-block 5: scale 33 = 0b100001, min 17 = 0b010001:
  // low nibbles in byte 9 (scale low, min high), high 2 bits in bytes 1 (scale) and 5 (min).
  b[4 + 0] = 2;
  b[4 + 4] = 3;
  b[4 + 9] = 0x11;
  b[4 + 1] = 0x80;        // scale 5 high bits = 0b10
  b[4 + 5] = 0x40;        // min 5 high bits = 0b01
  b[16 + 0] = 0x0F;       // element 0 (sub-block 0, low nibble) = 15
  b[16 + 64 + 3] = 0x70;  // element 32*5+3 = 163 (sub-block 5 = high nibbles of qs[64..95]) = 7
  const auto y = testing::dequantized(GgmlType::Q4_K, b.data(), 256);
  EXPECT_EQ(y[0], 2.0f * 15 - 1.5f);
  EXPECT_EQ(y[1], -1.5f);
  EXPECT_EQ(y[163], 33.0f * 7 - 8.5f);
  EXPECT_EQ(y[160], -8.5f);
}

TEST(Dequant, Q6_KHandBuilt) {
  std::vector<uint8_t> b(210, 0);
  put_u16(b, 208, 0x3C00);                // d = 1
  b[192 + 0] = static_cast<uint8_t>(-2);  // scale of elements 0-15
  b[192 + 4] = 3;                         // scale of elements 64-79
  b[0] = 0x21;                            // element 0 low = 1, element 64 low = 2
  b[128] = 0x02;                          // qh[0]: element 0 high = 2, element 64 high (bits 4-5) = 0
  const auto y = testing::dequantized(GgmlType::Q6_K, b.data(), 256);
  EXPECT_EQ(y[0], -2.0f * ((1 | (2 << 4)) - 32));
  EXPECT_EQ(y[64], 3.0f * (2 - 32));
  EXPECT_EQ(y[1], -2.0f * -32);
}

TEST(Dequant, IQ4_NLAndMXFP4HandBuilt) {
  std::vector<uint8_t> nl(18, 0);
  put_u16(nl, 0, 0x3800);  // d = 0.5
  nl[2] = 0xF0;            // element 0: index 0 → -127, element 16: index 15 → 113
  auto y = testing::dequantized(GgmlType::IQ4_NL, nl.data(), 32);
  EXPECT_EQ(y[0], -63.5f);
  EXPECT_EQ(y[16], 56.5f);

  // MXFP4: E8M0 exponent 127 is a scale of 1; E2M1 code 7 is 6.0, code 0xF is -6.0, 0xA -1.0.
  std::vector<uint8_t> mx(17, 0);
  mx[0] = 127;
  mx[1] = 0xF7;
  mx[2] = 0x0A;
  y = testing::dequantized(GgmlType::MXFP4, mx.data(), 32);
  EXPECT_EQ(y[0], 6.0f);
  EXPECT_EQ(y[16], -6.0f);
  EXPECT_EQ(y[1], -1.0f);
  EXPECT_EQ(y[17], 0.0f);
  mx[0] = 130;  // scale 8
  EXPECT_EQ(testing::dequantized(GgmlType::MXFP4, mx.data(), 32)[0], 48.0f);
  mx[0] = 0;  // scale 2^-127, a subnormal: code 1 (0.5) gives 2^-128
  mx[1] = 0x01;
  EXPECT_EQ(testing::dequantized(GgmlType::MXFP4, mx.data(), 32)[0], std::ldexp(1.0f, -128));
}

TEST(Dequant, Q8_KHandBuilt) {
  std::vector<uint8_t> b(292, 0);
  const float d = -0.125f;
  std::memcpy(b.data(), &d, 4);
  b[4] = 100;
  const auto y = testing::dequantized(GgmlType::Q8_K, b.data(), 256);
  EXPECT_EQ(y[0], -12.5f);
}

TEST(Dequant, UnsupportedTypesFailByName) {
  std::vector<uint8_t> buf(1024);
  std::vector<float> out(256);
  for (GgmlType t : {GgmlType::TQ1_0, GgmlType::TQ2_0}) {
    EXPECT_FALSE(can_dequantize(t));
    try {
      dequantize_row(t, buf.data(), out.data(), 256);
      ADD_FAILURE() << "no error for " << ggml_type_name(t);
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "tensor type " + std::string(ggml_type_name(t)) + " is not supported yet");
    }
    EXPECT_THROW(vec_dot_type(t), Error);
    EXPECT_THROW(vec_dot(t, 256, buf.data(), buf.data()), Error);
  }
  EXPECT_THROW(quantize_row(GgmlType::Q4_1, out.data(), buf.data(), 256), Error);  // no quantizer
  EXPECT_THROW(quantize_row(GgmlType::TQ1_0, out.data(), buf.data(), 256), Error);
}

TEST(Dequant, RowLengthMustBeWholeBlocks) {
  std::vector<uint8_t> buf(1024);
  std::vector<float> out(256);
  EXPECT_THROW(dequantize_row(GgmlType::Q4_K, buf.data(), out.data(), 100), Error);
  EXPECT_THROW(quantize_row(GgmlType::Q8_0, out.data(), buf.data(), 33), Error);
}

TEST(Dequant, SupportSets) {
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                     GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K,
                     GgmlType::Q6_K, GgmlType::Q8_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4})
    EXPECT_TRUE(can_dequantize(t)) << ggml_type_name(t);
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K,
                     GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_K})
    EXPECT_TRUE(can_quantize(t)) << ggml_type_name(t);
}

// SIMD dequantization must equal the reference bit for bit, on random blocks of every scale
// case and on all-zero / all-one quant bits.
TEST(Dequant, SimdMatchesReferenceBitExact) {
  if (!quant_isa_available(QuantIsa::Avx2)) GTEST_SKIP() << "CPU without AVX2+FMA+F16C";
  std::mt19937 rng(11);
  int n_kernels = 0;
  int count = 0;
  const GgmlType* all = ggml_all_types(&count);
  for (int ti = 0; ti < count; ++ti) {
    const GgmlType t = all[ti];
    DequantizeFn simd = find_dequantize(t, QuantIsa::Avx2);
    if (!simd) continue;
    ++n_kernels;
    const int64_t n = 8 * 256 + (ggml_traits(t).block_elems == 1 ? 5 : 0);  // odd tail for plain types
    for (auto sc : testing::kAllScaleCases) {
      for (auto bits : {testing::BitsCase::Random, testing::BitsCase::AllZero, testing::BitsCase::AllOnes}) {
        const auto row = testing::random_row(t, n, rng, sc, bits);
        std::vector<float> want(n), got(n);
        dequantize_row_ref(t, row.data(), want.data(), n);
        simd(row.data(), got.data(), n);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(bits_of(got[i]), bits_of(want[i]))
              << ggml_type_name(t) << " " << testing::scale_case_name(sc) << " element " << i;
      }
    }
  }
  EXPECT_GE(n_kernels, 6);
}

TEST(Dequant, SimdF16AllPatternsBitExact) {
  DequantizeFn simd = find_dequantize(GgmlType::F16, QuantIsa::Avx2);
  if (!simd) GTEST_SKIP() << "no AVX2 F16 kernel on this CPU";
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
  std::vector<float> want(65536), got(65536);
  dequantize_row_ref(GgmlType::F16, all.data(), want.data(), 65536);
  simd(all.data(), got.data(), 65536);
  for (uint32_t h = 0; h < 65536; ++h) ASSERT_EQ(bits_of(got[h]), bits_of(want[h])) << std::hex << h;
}

}  // namespace
}  // namespace mla
