#pragma once
// Internal: the values of ik_llama.cpp's trellis types (IQ1_KT, IQ2_KT, IQ3_KT, IQ4_KT), shared by
// trellis.cpp and trellis_avx2.cpp. Functions are `static` (see util/ggml_blocks.h).
//
// A row is a float row scale d, then super-blocks of 256 elements in blocks of 32. Each group of
// 8 elements (4 for IQ4_KT) is one index into a trellis: a 32-bit state x = index + offset is
// stepped by x *= kTrellisMul once per element, and the element's level is the sum of the four
// bytes of x & 0x3f3f3f3f, minus 126 (so levels are integers in [-126, 126]). An element's value
// is d * (block scale) * level; IQ3_KT stores |level| and a sign bit per element.
#include <cstdint>
#include <cstring>

#include "util/ggml_blocks.h"

namespace mla::quant {

inline constexpr uint32_t kTrellisMul = 0xCBAC1FEDu;
inline constexpr uint32_t kTrellisOffset = 4096;
// IQ4_KT blocks whose word has bit 0 set add this to the offset.
inline constexpr uint32_t kTrellisOffsetHigh = 32768;

// The 32 non-linear scale levels ik_llama.cpp names iq4k_values (the first 16 are IQ4_NL's).
inline constexpr int8_t kIQ4KValues[32] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
                                           -123, -100, -79, -61, -45, -31, -18, -6,  5, 17, 29, 42, 57, 73, 93, 117};

// The n levels (n = 4 or 8) of trellis index idx.
static inline void trellis_levels(uint32_t idx, uint32_t offset, int n, int32_t* level) {
  uint32_t x = idx + offset;
  for (int k = 0; k < n; ++k) {
    x *= kTrellisMul;
    const uint32_t s = x & 0x3f3f3f3fu;
    level[k] = static_cast<int32_t>((s & 0xff) + ((s >> 8) & 0xff) + ((s >> 16) & 0xff) + (s >> 24)) - 126;
  }
}

static inline float kt_row_scale(const void* row) {
  float d;
  std::memcpy(&d, row, 4);
  return d;
}

static inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// The 13-bit index of group g (0-31) of an IQ1_KT super-block (block g / 4, group g % 4).
static inline uint32_t iq1_kt_index(const BlockIQ1_KT& b, int g) {
  const int ib = g / 4, ig = g % 4;
  const uint32_t hi = g < 16 ? (b.qh[g % 16] & 0x0F) : (b.qh[g % 16] >> 4);
  return b.ql[g] | hi << 8 | ((b.sh[ib] >> (4 + ig)) & 1u) << 12;
}

// IQ2_KT / IQ3_KT: super-block element e belongs to group e / 8; groups 0-15 are the first half
// (block b takes the low nibble of scales[b]), groups 16-31 the second (high nibble of
// scales[b - 4]).
static inline int kt_half_scale_index(const uint8_t* scales, int block) {
  return block < 4 ? scales[block] & 0x0F : scales[block - 4] >> 4;
}

// The 15-bit index and the offset of group g (0-63, 4 elements) of an IQ4_KT super-block.
static inline uint32_t iq4_kt_index(const BlockIQ4_KT& b, int g, uint32_t* offset) {
  const int ib = g / 8, ig = g % 8;
  const auto* ql = reinterpret_cast<const uint8_t*>(b.qs + 8);
  const uint8_t* qh = ql + 64;
  const uint32_t word = b.qs[ib];
  *offset = (word & 1) ? kTrellisOffset + kTrellisOffsetHigh : kTrellisOffset;
  const uint32_t hi = g < 32 ? (qh[g % 32] & 0x0F) : (qh[g % 32] >> 4);
  return ql[g] | hi << 8 | ((word >> (8 + 3 * ig)) & 7u) << 12;
}
static inline int iq4_kt_scale(const BlockIQ4_KT& b, int block) {
  return static_cast<int>((b.qs[block] & 0xff) >> 1) - 64;
}

}  // namespace mla::quant
