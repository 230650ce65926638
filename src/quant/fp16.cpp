// IEEE binary16 and bfloat16 conversions in portable integer code, so results do not depend
// on the CPU (F16C) or the compiler. Rounding is to nearest, ties to even, as numpy and ggml.
#include <cstring>

#include "quant/quant.h"

namespace mla {
namespace {

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  if (exp == 0x1F) return bits_float(sign | 0x7F800000u | (mant << 13));  // Inf, NaN (payload kept)
  if (exp != 0) return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return bits_float(sign);
  // Subnormal mant * 2^-24: normalise into an fp32 exponent.
  uint32_t e = 113;
  while ((mant & 0x400) == 0) {
    mant <<= 1;
    --e;
  }
  return bits_float(sign | (e << 23) | ((mant & 0x3FF) << 13));
}

uint16_t fp32_to_fp16(float f) {
  const uint32_t u = float_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000;
  const uint32_t a = u & 0x7FFFFFFF;
  // NaN: keep the top payload bits and make it quiet, as F16C's vcvtps2ph does.
  if (a > 0x7F800000) return static_cast<uint16_t>(sign | 0x7E00 | ((a >> 13) & 0x3FF));
  // |f| >= 65520 (halfway between 65504 and 2^16) rounds to infinity.
  if (a >= 0x477FF000) return static_cast<uint16_t>(sign | 0x7C00);
  if (a >= 0x38800000) {  // normal half: |f| >= 2^-14
    uint32_t q = ((a >> 23) - 112) << 10 | ((a >> 13) & 0x3FF);
    const uint32_t rem = a & 0x1FFF;
    if (rem > 0x1000 || (rem == 0x1000 && (q & 1))) ++q;  // a carry into the exponent is right
    return static_cast<uint16_t>(sign | q);
  }
  if (a <= 0x33000000) return static_cast<uint16_t>(sign);  // |f| <= 2^-25 rounds to zero
  // Subnormal half: result = RNE(|f| / 2^-24) with |f| = m * 2^(e-150).
  const uint32_t e = a >> 23;
  const uint32_t m = (a & 0x7FFFFF) | 0x800000;
  const uint32_t shift = 126 - e;  // 14..24
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) ++q;  // may reach 0x400, the smallest normal
  return static_cast<uint16_t>(sign | q);
}

float bf16_to_fp32(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

uint16_t fp32_to_bf16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

}  // namespace mla
