#pragma once
// Internal: the value tables of ik_llama.cpp's non-trellis quants (Q6_0, IQ2_K .. IQ6_K and the
// row-scaled IQ2_KS, IQ3_KS, IQ2_KL, IQ4_KS, IQ4_KSS, IQ5_KS), facts of its ggml-common.h (their
// block layouts are in util/ggml_blocks.h, which gguf/'s interleave undo reads too), and one
// decoder per type into integer levels and integer group scales shared by the reference
// dequantization, the reference dot and the AVX2 dots.
//
// Every type but IQ6_K decodes to x = d * scale[group] * level exactly as ik_llama.cpp computes it
// (d the block's fp16 or the row's scale, scale and level small integers), so
// dequantization is `(d * scale) * level` in float and a dot is exact in integers per block.
// Like blocks.h, helpers are `static` because AVX2 and baseline objects include this header.
#include <cstdint>
#include <cstring>

#include "quant/quant.h"
#include "util/ggml_blocks.h"

namespace mla::quant {

// Non-linear value tables; each second half is the table shifted by a little (the "extra" bit).
inline constexpr int8_t kIQ2NLValues[8] = {-31, -13, 1, 17, -26, -8, 6, 22};
inline constexpr int8_t kIQ3NLValues[16] = {-63, -40, -23, -10, 1, 13, 28, 47, -59, -36, -19, -6, 5, 17, 32, 51};
inline constexpr int8_t kIQ4KValues[32] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
                                           -123, -100, -79, -61, -45, -31, -18, -6,  5, 17, 29, 42, 57, 73, 93, 117};
inline constexpr int8_t kIQ5NLValues[64] = {
    -126, -114, -103, -92, -83, -74, -65, -57, -50, -43, -36,  -30,  -24,  -18, -12, -6,  -1,  5,   11,  17,  23,  29,
    36,   43,   51,   59,  68,  77,  87,  97,  109, 121, -124, -112, -101, -90, -81, -72, -63, -55, -48, -41, -34, -28,
    -22,  -16,  -10,  -4,  1,   7,   13,  19,  25,  31,  38,   45,   53,   61,  70,  79,  89,  99,  111, 123};
// IQ6_K's levels as the dot products use them; dequantization evaluates the cubic below instead,
// as ik_llama.cpp does, and the two differ by less than half a level.
inline constexpr int8_t kIQ6NLValues[128] = {
    -127, -121, -115, -109, -104, -98, -93, -88, -84, -79, -74, -70, -66, -62, -58, -54, -51, -47, -44, -40, -37,  -34,
    -31,  -28,  -25,  -22,  -19,  -16, -13, -11, -8,  -5,  -2,  0,   3,   6,   9,   12,  14,  17,  20,  23,  27,   30,
    33,   36,   40,   44,   47,   51,  55,  59,  63,  68,  72,  77,  82,  87,  92,  98,  103, 109, 115, 121, -126, -120,
    -114, -108, -103, -97,  -92,  -87, -83, -78, -73, -69, -65, -61, -57, -53, -50, -46, -43, -39, -36, -33, -30,  -27,
    -24,  -21,  -18,  -15,  -12,  -10, -7,  -4,  -1,  1,   4,   7,   10,  13,  15,  18,  21,  24,  28,  31,  34,   37,
    41,   45,   48,   52,   56,   60,  64,  69,  73,  78,  83,  88,  93,  99,  104, 110, 116, 122};
// IQ6_K level of index q (0..63) plus m (0 or 1): -127 + q(6.2568 - q(0.11218 - 0.0011972 q)) + m.
inline constexpr float kIQ6KCubic[4] = {-127.f, 6.2568f, 0.11218f, 0.0011972f};
// IQ2_KL's 32 pairs of levels: low byte the first element, high byte the second (both int8).
inline constexpr uint16_t kIQ2KLPairs[32] = {0xe9c1, 0x0dc1, 0xc1d8, 0xf6d8, 0x0dd8, 0x2fd8, 0xd8e9, 0xe9e9,
                                             0x01e9, 0x0de9, 0x1ce9, 0xc1f6, 0x01f6, 0x0df6, 0x2ff6, 0xe901,
                                             0xf601, 0x0101, 0x0d01, 0x1c01, 0xd80d, 0xe90d, 0xf60d, 0x010d,
                                             0x0d0d, 0xc11c, 0xe91c, 0x011c, 0x1c1c, 0x2f1c, 0xe92f, 0x0d2f};

// One super-block decoded: level[e] of each of its 256 elements and the integer scale of each
// group of 256 / n_groups elements, so x[e] = d * scale[e / group] * level[e].
struct IqkLevels {
  int8_t level[kQK_K];
  int16_t scale[16];
  int n_groups;
};

// Row header: the row's scale and where its first block starts.
static inline float iqk_row_scale_f32(const void* row) {
  float d;
  std::memcpy(&d, row, 4);
  return d;
}
static inline float iqk_row_scale_f16(const void* row) {
  uint16_t h;
  std::memcpy(&h, row, 2);
  return fp16_to_fp32(h);
}

static inline void iqk_decode(const BlockIQ2_K& b, IqkLevels& u) {
  u.n_groups = 16;
  for (int g = 0; g < 16; ++g) u.scale[g] = static_cast<int16_t>(((b.scales[g / 2] >> (4 * (g % 2))) & 0xf) - 8);
  for (int e = 0; e < kQK_K; ++e) {
    const int idx = (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
    u.level[e] = kIQ2NLValues[idx + 4 * ((b.extra >> (e / 16)) & 1)];
  }
}

static inline void iqk_decode(const BlockIQ3_K& b, IqkLevels& u) {
  u.n_groups = 16;
  for (int g = 0; g < 16; ++g) {
    const int mag = 2 * ((b.scales_l[g / 2] >> (4 * (g % 2))) & 0xf) + 1;
    u.scale[g] = static_cast<int16_t>((b.scales_h >> g) & 1 ? -mag : mag);
  }
  for (int e = 0; e < kQK_K; ++e) {
    const int lo = (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
    const int hi = (b.qh[e % 32] >> (e / 32)) & 1;
    u.level[e] = kIQ3NLValues[(lo | hi << 2) + 8 * ((b.extra >> (e / 16)) & 1)];
  }
}

static inline void iqk_decode(const BlockIQ4_K& b, IqkLevels& u) {
  u.n_groups = 16;
  for (int g = 0; g < 16; ++g) {
    const int lo = (b.scales_l[g / 2] >> (4 * (g % 2))) & 0xf;
    const int hi = (b.scales_h[g / 4] >> (2 * (g % 4))) & 3;
    u.scale[g] = static_cast<int16_t>((lo | hi << 4) - 32);
  }
  for (int e = 0; e < kQK_K; ++e) {
    const int idx = (b.qs[16 * (e / 32) + e % 16] >> (4 * ((e / 16) % 2))) & 0xf;
    u.level[e] = kIQ4KValues[idx + 16 * ((b.extra >> (e / 16)) & 1)];
  }
}

// IQ5_K / IQ6_K / IQ5_KS low nibble of element e: per 64 elements, 32 bytes, low nibbles first.
static inline int iqk_nibble64(const uint8_t* qs, int e) {
  return (qs[32 * (e / 64) + e % 32] >> (4 * ((e / 32) % 2))) & 0xf;
}

static inline void iqk_decode(const BlockIQ5_K& b, IqkLevels& u) {
  u.n_groups = 16;
  for (int g = 0; g < 16; ++g) {
    const int lo = (b.scales_l[g / 2] >> (4 * (g % 2))) & 0xf;
    const int hi = (b.scales_h[g / 4] >> (2 * (g % 4))) & 3;
    u.scale[g] = static_cast<int16_t>((lo | hi << 4) - 32);
  }
  for (int e = 0; e < kQK_K; ++e) {
    const int hi = (b.qh[e % 32] >> (2 * (e / 64) + (e / 32) % 2)) & 1;
    u.level[e] = kIQ5NLValues[(iqk_nibble64(b.qs, e) | hi << 4) + 32 * ((b.extra >> (e / 16)) & 1)];
  }
}

// IQ6_K's 6-bit index of element e (0..63) and the extra bit of its group.
static inline int iqk6_index(const BlockIQ6_K& b, int e) {
  const int k = e / 64;
  const int hi = (b.qh[32 * (k / 2) + e % 32] >> (4 * (k % 2) + 2 * ((e / 32) % 2))) & 3;
  return iqk_nibble64(b.qs, e) | hi << 4;
}

static inline void iqk_decode(const BlockIQ6_K& b, IqkLevels& u) {
  u.n_groups = 16;
  for (int g = 0; g < 16; ++g) u.scale[g] = b.scales[g];
  for (int e = 0; e < kQK_K; ++e) u.level[e] = kIQ6NLValues[iqk6_index(b, e) + 64 * ((b.extra >> (e / 16)) & 1)];
}

static inline void iqk_decode(const BlockIQ4_KS& b, IqkLevels& u) {
  u.n_groups = 8;
  for (int g = 0; g < 8; ++g) u.scale[g] = static_cast<int16_t>((b.scales[g] & 254) - 127);
  for (int e = 0; e < kQK_K; ++e) {
    const int idx = (b.qs[16 * (e / 32) + e % 16] >> (4 * ((e / 16) % 2))) & 0xf;
    u.level[e] = kIQ4KValues[idx + 16 * (b.scales[e / 32] & 1)];
  }
}

static inline void iqk_decode(const BlockIQ4_KSS& b, IqkLevels& u) {
  u.n_groups = 8;
  for (int g = 0; g < 8; ++g) {
    // Bit 0 of each word is a scale bit; the other 15 bits, Gray-decoded by one xor with
    // themselves shifted right, are the group's 16 bytes of nibbles.
    uint8_t nib[16];
    int ls = 0;
    for (int k = 0; k < 8; ++k) {
      const uint16_t w = b.qs[8 * g + k];
      uint16_t v = w & 0xfffe;
      v ^= v >> 1;
      nib[2 * k] = static_cast<uint8_t>(v & 0xff);
      nib[2 * k + 1] = static_cast<uint8_t>(v >> 8);
      ls |= (w & 1) << k;
    }
    u.scale[g] = static_cast<int16_t>((ls & 254) - 127);
    const int8_t* values = kIQ4KValues + 16 * (ls & 1);
    for (int j = 0; j < 16; ++j) {
      u.level[32 * g + j] = values[nib[j] & 0xf];
      u.level[32 * g + j + 16] = values[nib[j] >> 4];
    }
  }
}

static inline void iqk_decode(const BlockIQ5_KS& b, IqkLevels& u) {
  u.n_groups = 8;
  for (int g = 0; g < 8; ++g) u.scale[g] = static_cast<int16_t>((b.scales[g] & 254) - 127);
  for (int e = 0; e < kQK_K; ++e) {
    const int hi = (b.qh[e % 32] >> (e / 32)) & 1;
    u.level[e] = kIQ5NLValues[(iqk_nibble64(b.qs, e) | hi << 4) + 32 * (b.scales[e / 32] & 1)];
  }
}

static inline void iqk_decode(const BlockIQ2_KS& b, IqkLevels& u) {
  u.n_groups = 8;
  for (int g = 0; g < 8; ++g) {
    const int lo = (b.scales[g / 2] >> (4 * (g % 2))) & 0xf;
    u.scale[g] = static_cast<int16_t>((lo | ((b.extra >> (8 + g)) & 1) << 4) - 16);
  }
  for (int e = 0; e < kQK_K; ++e) {
    const int idx = (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
    u.level[e] = kIQ2NLValues[idx + 4 * ((b.extra >> (e / 32)) & 1)];
  }
}

static inline void iqk_decode(const BlockIQ3_KS& b, IqkLevels& u) {
  u.n_groups = 8;
  for (int g = 0; g < 8; ++g) {
    const int lo = (b.scales[g % 4] >> (4 * (g / 4))) & 0xf;
    u.scale[g] = static_cast<int16_t>((lo | ((b.extra >> g) & 1) << 4) - 16);
  }
  for (int e = 0; e < kQK_K; ++e) {
    const int lo = (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
    const int hi = (b.qh[e % 32] >> (e / 32)) & 1;
    u.level[e] = kIQ3NLValues[(lo | hi << 2) + 8 * ((b.extra >> (8 + e / 32)) & 1)];
  }
}

static inline void iqk_decode(const BlockIQ2_KL& b, IqkLevels& u) {
  u.n_groups = 8;
  for (int g = 0; g < 8; ++g) {
    const int lo = (b.scales_l[g % 4] >> (4 * (g / 4))) & 0xf;
    u.scale[g] = static_cast<int16_t>((lo | ((b.scales_h >> (2 * g)) & 3) << 4) - 32);
  }
  // Group g = 2k + h: pair j (elements 2j, 2j+1 of the group) is nibble h of qs[16k + j] with
  // fifth bit g of qh[j].
  for (int g = 0; g < 8; ++g)
    for (int j = 0; j < 16; ++j) {
      const int idx = ((b.qs[16 * (g / 2) + j] >> (4 * (g % 2))) & 0xf) | ((b.qh[j] >> g) & 1) << 4;
      u.level[32 * g + 2 * j] = static_cast<int8_t>(kIQ2KLPairs[idx] & 0xff);
      u.level[32 * g + 2 * j + 1] = static_cast<int8_t>(kIQ2KLPairs[idx] >> 8);
    }
}

// Q6_0 levels (-32..31) of one 32-element block.
static inline void q6_0_levels(const BlockQ6_0& b, int* q) {
  for (int j = 0; j < 16; ++j) {
    const int h = b.qh[j % 8] >> (4 * (j / 8));
    q[j] = ((b.qs[j] & 0xf) | ((h << 4) & 0x30)) - 32;
    q[j + 16] = ((b.qs[j] >> 4) | ((h << 2) & 0x30)) - 32;
  }
}

}  // namespace mla::quant
