#pragma once
// Random test data for the quant tests: weight rows of any block type with controlled scale
// fields (random bytes elsewhere), and float rows with edge-case magnitudes.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "quant/quant.h"
#include "util/ggml_type.h"

namespace mla::testing {

// How the fp16 scale fields (d, dmin, m) of generated blocks are chosen.
enum class ScaleCase {
  Random,  // ±[2^-10, 2^-2]
  Zero,    // 0
  Tiny,    // smallest fp16 subnormal and smallest normal, alternating
  Huge,    // ±65504, the largest finite fp16
};
inline const char* scale_case_name(ScaleCase c) {
  switch (c) {
    case ScaleCase::Random:
      return "random";
    case ScaleCase::Zero:
      return "zero";
    case ScaleCase::Tiny:
      return "tiny";
    case ScaleCase::Huge:
      return "huge";
  }
  return "?";
}
inline constexpr ScaleCase kAllScaleCases[] = {ScaleCase::Random, ScaleCase::Zero, ScaleCase::Tiny, ScaleCase::Huge};

// How the quant bits of generated blocks are chosen.
enum class BitsCase { Random, AllZero, AllOnes };

// Byte offsets of the fp16 scale fields inside one block of t (empty for plain types).
inline std::vector<int> half_scale_offsets(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0:
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS:
    case GgmlType::IQ1_S:
    case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS:
    case GgmlType::IQ2_S:
    case GgmlType::IQ3_XXS:
    case GgmlType::IQ3_S:
    case GgmlType::Q6_0:
    case GgmlType::IQ2_K:
    case GgmlType::IQ3_K:
    case GgmlType::IQ4_K:
    case GgmlType::IQ5_K:
    case GgmlType::IQ6_K:
      return {0};
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
      return {0, 2};
    case GgmlType::Q2_K:
      return {80, 82};
    case GgmlType::Q3_K:
      return {108};
    case GgmlType::Q6_K:
      return {208};
    default:
      return {};
  }
}

inline uint16_t pick_half_scale(ScaleCase c, std::mt19937& rng, int k) {
  std::uniform_real_distribution<float> mag(-10.0f, -2.0f);
  const uint16_t sign = (rng() & 1) ? 0x8000 : 0;
  switch (c) {
    case ScaleCase::Random:
      return sign | fp32_to_fp16(std::exp2(mag(rng)));
    case ScaleCase::Zero:
      return 0;
    case ScaleCase::Tiny:
      return sign | ((k & 1) ? 0x0400 : 0x0001);
    case ScaleCase::Huge:
      return sign | 0x7BFF;
  }
  return 0;
}

// n elements (a multiple of t's block size) of t. Plain float types get normal(0,1) values
// (scaled by 8192 for F16 or 1e20 for F32/BF16 when Huge, by 2^-24 when Tiny); MXFP4 gets
// exponents in [100, 150] (Random), 0 and 1 (Zero, Tiny: the subnormal scales 2^-128, 2^-127) or
// 200 (Huge: 2^72); NVFP4 and the trellis types (row scale) likewise; Q8_K gets an fp32 scale like the fp16 ones and
// bsums that match its quants.
inline std::vector<uint8_t> random_row(GgmlType t, int64_t n, std::mt19937& rng, ScaleCase sc,
                                       BitsCase bits = BitsCase::Random) {
  const auto& tr = ggml_traits(t);
  std::vector<uint8_t> row(static_cast<size_t>(ggml_row_bytes(t, n)));
  if (t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16) {
    std::normal_distribution<float> dist;
    // Huge stays finite: F16 tops out at 65504, and F32/BF16 products must not overflow.
    const float huge = t == GgmlType::F16 ? 8192.0f : 1e20f;
    const float scale = sc == ScaleCase::Huge ? huge : sc == ScaleCase::Tiny ? std::ldexp(1.0f, -24) : 1.0f;
    std::vector<float> f(n);
    for (auto& v : f) v = sc == ScaleCase::Zero ? 0.0f : dist(rng) * scale;
    quantize_row(t, f.data(), row.data(), n);
    return row;
  }
  for (auto& b : row) b = bits == BitsCase::Random ? static_cast<uint8_t>(rng()) : bits == BitsCase::AllOnes ? 0xFF : 0;
  // ik_llama.cpp's row-scaled types (trellis ones included): the row's scale, an fp32 (4 bytes) or fp16 (2 bytes)
  // header.
  if (tr.row_meta_bytes == 4) {
    const float d = fp16_to_fp32(pick_half_scale(sc, rng, 0));
    std::memcpy(row.data(), &d, 4);
  } else if (tr.row_meta_bytes == 2) {
    const uint16_t h = pick_half_scale(sc, rng, 0);
    std::memcpy(row.data(), &h, 2);
  }
  const int64_t n_blocks = n / tr.block_elems;
  for (int64_t i = 0; i < n_blocks; ++i) {
    uint8_t* blk = row.data() + tr.row_meta_bytes + i * tr.block_bytes;
    int k = static_cast<int>(i);
    for (int off : half_scale_offsets(t)) {
      const uint16_t h = pick_half_scale(sc, rng, k++);
      std::memcpy(blk + off, &h, 2);
    }
    if (t == GgmlType::IQ1_M) {
      // The fp16 scale lies in the top nibbles of the four scale words at byte 48.
      const uint16_t h = pick_half_scale(sc, rng, k);
      for (int w = 0; w < 4; ++w) {
        uint16_t v;
        std::memcpy(&v, blk + 48 + 2 * w, 2);
        v = static_cast<uint16_t>((v & 0x0fff) | (((h >> (4 * w)) & 0xf) << 12));
        std::memcpy(blk + 48 + 2 * w, &v, 2);
      }
    }
    if (t == GgmlType::MXFP4) {
      blk[0] = sc == ScaleCase::Random ? static_cast<uint8_t>(100 + rng() % 51)
               : sc == ScaleCase::Huge ? 200
               : sc == ScaleCase::Tiny ? 1
                                       : 0;
    }
    if (t == GgmlType::NVFP4) {
      // UE4M3 sub-block scales: any byte (Random: 0x7F is NaN, read as 0), 0, the smallest
      // subnormal, or 0xFF (the largest, 240).
      for (int s = 0; s < 4; ++s)
        blk[s] = sc == ScaleCase::Random ? static_cast<uint8_t>(rng())
                 : sc == ScaleCase::Huge ? 0xFF
                 : sc == ScaleCase::Tiny ? 0x01
                                         : 0x00;
    }
    if (t == GgmlType::Q8_K) {
      const float d = fp16_to_fp32(pick_half_scale(sc, rng, k));
      std::memcpy(blk, &d, 4);
      for (int g = 0; g < 16; ++g) {
        int sum = 0;
        for (int j = 0; j < 16; ++j) sum += static_cast<int8_t>(blk[4 + 16 * g + j]);
        const auto s16 = static_cast<int16_t>(sum);
        std::memcpy(blk + 4 + 256 + 2 * g, &s16, 2);
      }
    }
  }
  return row;
}

// Float rows for activations: normal(0,1) times `scale`, optionally with every value set to
// ±scale (so quantized activations hit ±127).
inline std::vector<float> random_floats(int64_t n, std::mt19937& rng, float scale, bool extremes = false) {
  std::normal_distribution<float> dist;
  std::vector<float> f(n);
  for (auto& v : f) v = extremes ? ((rng() & 1) ? scale : -scale) : dist(rng) * scale;
  return f;
}

inline std::vector<uint8_t> quantized(GgmlType t, const std::vector<float>& f) {
  std::vector<uint8_t> out(static_cast<size_t>(ggml_row_bytes(t, static_cast<int64_t>(f.size()))));
  quantize_row(t, f.data(), out.data(), static_cast<int64_t>(f.size()));
  return out;
}

inline std::vector<float> dequantized(GgmlType t, const void* data, int64_t n) {
  std::vector<float> f(n);
  dequantize_row_ref(t, data, f.data(), n);
  return f;
}

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline std::string type_label(GgmlType t) { return std::string(ggml_type_name(t)); }

}  // namespace mla::testing
