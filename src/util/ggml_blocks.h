#pragma once
// Internal: the on-disk block layouts of the ggml formats mla.cpp decodes, and the small
// helpers every kernel file shares (namespace quant: the block vocabulary of quant/'s kernels,
// also read by gguf/'s interleave undo, which sits below quant/). Layouts are facts of the GGUF
// format (ggml-common.h); sizes are checked against the type table by static_assert and tests.
// Helper functions are `static` on purpose: this header is compiled both with and without
// -mavx2 (the *_avx2.cpp files), and an inline function with external linkage could be merged
// by the linker into its AVX2-compiled copy and then run on a CPU without AVX2.
#include <cstdint>
#include <cstring>

namespace mla::quant {

inline constexpr int kQK = 32;     // elements per block of the 32-element formats
inline constexpr int kQK_K = 256;  // elements per K-quant super-block

struct BlockQ4_0 {
  uint16_t d;           // fp16 scale
  uint8_t qs[kQK / 2];  // element j in the low nibble of qs[j], element j+16 in the high one
};
struct BlockQ4_1 {
  uint16_t d, m;  // fp16 scale and offset: x = d*q + m
  uint8_t qs[kQK / 2];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];  // bit j = 5th bit of element j (little-endian uint32)
  uint8_t qs[kQK / 2];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];  // per 16 elements: low nibble scale, high nibble min
  uint8_t qs[kQK_K / 4];       // 2-bit quants
  uint16_t d, dmin;
};
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];  // high bit, inverted: set means +0, clear means -4
  uint8_t qs[kQK_K / 4];     // low 2 bits
  uint8_t scales[12];        // 16 signed 6-bit scales, offset 32
  uint16_t d;
};
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];  // 8 six-bit scales and 8 six-bit mins (see unpack_k4_scales)
  uint8_t qs[kQK_K / 2];
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[kQK_K / 8];  // bit s of qh[l] = 5th bit of element 32*s + l
  uint8_t qs[kQK_K / 2];
};
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
struct BlockQ8_K {
  float d;  // fp32 scale (not fp16)
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];  // sum of each 16 consecutive qs
};
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[kQK / 2];  // indices into kIQ4NLValues, nibbles as in Q4_0
};
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;  // 2 high bits of each of the 8 sub-block scales
  uint8_t scales_l[kQK_K / 64];
  uint8_t qs[kQK_K / 2];  // 8 sub-blocks of 32, each laid out like IQ4_NL
};
struct BlockMXFP4 {
  uint8_t e;            // E8M0 shared exponent
  uint8_t qs[kQK / 2];  // E2M1 codes, nibbles as in Q4_0
};

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockIQ4_NL) == 18 && sizeof(BlockIQ4_XS) == 136 && sizeof(BlockMXFP4) == 17);

// NVFP4 (mainline llama.cpp): 64 elements in 4 sub-blocks of 16, each with its own UE4M3 scale.
struct BlockNVFP4 {
  uint8_t d[4];    // UE4M3 scale of sub-block s (unsigned: bit 7 is not a sign)
  uint8_t qs[32];  // sub-block s: qs[8s + j] holds element j (low nibble) and j + 8 (high nibble)
};
static_assert(sizeof(BlockNVFP4) == 36);

// ik_llama.cpp's non-trellis quants (Q6_0, IQ2_K..IQ6_K and the row-scaled IQ2_KS, IQ3_KS, IQ2_KL,
// IQ4_KS, IQ4_KSS, IQ5_KS; quant/iqk_blocks.h holds their value tables and decoders).
struct BlockQ6_0 {
  uint16_t d;
  uint8_t qh[kQK / 4];  // 2 high bits: element j (j < 16) at bits 4(j/8)..+1 of qh[j%8], j+16 two above
  uint8_t qs[kQK / 2];  // low nibbles as Q4_0: element j low, j+16 high
};
struct BlockIQ2_K {
  uint16_t d;
  uint16_t extra;              // bit g: group g (16 elements) uses the shifted value table
  uint8_t scales[kQK_K / 32];  // 4-bit scales - 8, two per byte (group 2i low, 2i+1 high)
  uint8_t qs[kQK_K / 4];       // 2-bit indices: element 128h + 32s + l at bits 2s of qs[32h + l]
};
struct BlockIQ3_K {
  uint16_t d;
  uint16_t extra;
  uint16_t scales_h;             // sign of each of the 16 group scales
  uint8_t scales_l[kQK_K / 32];  // |scale| = 2 * nibble + 1
  uint8_t qs[kQK_K / 4];         // low 2 bits as IQ2_K
  uint8_t qh[kQK_K / 8];         // third bit: element 32s + l at bit s of qh[l]
};
struct BlockIQ4_K {
  uint16_t d;
  uint16_t extra;
  uint8_t scales_h[kQK_K / 64];  // 2 high bits of each 6-bit scale (offset 32)
  uint8_t scales_l[kQK_K / 32];  // 4 low bits
  uint8_t qs[kQK_K / 2];         // sub-block of 32 as IQ4_NL
};
struct BlockIQ5_K {
  uint16_t d;
  uint16_t extra;
  uint8_t scales_h[kQK_K / 64];
  uint8_t scales_l[kQK_K / 32];
  uint8_t qs[kQK_K / 2];  // per 64: low nibbles of elements 0..31, high nibbles of 32..63
  uint8_t qh[kQK_K / 8];  // fifth bit: element 64k + 32h + l at bit 2k + h of qh[l]
};
struct BlockIQ6_K {
  uint16_t d;
  uint16_t extra;
  int8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 2];  // as IQ5_K
  uint8_t qh[kQK_K / 4];  // 2 high bits: element 64k + 32h + l at bits 4(k%2) + 2h of qh[32(k/2) + l]
};
// The row-scaled types: a row is a scale (fp32 for IQ4_KS, IQ4_KSS, IQ5_KS; fp16 for IQ2_KS,
// IQ3_KS, IQ2_KL) followed by these blocks.
struct BlockIQ4_KS {
  uint8_t scales[kQK_K / 32];  // per 32: bit 0 selects the value table, (s & 254) - 127 the scale
  uint8_t qs[kQK_K / 2];
};
struct BlockIQ4_KSS {
  uint16_t qs[kQK_K / 4];  // per 32: 8 words; bit 0 of word k = bit k of the scale byte, the rest Gray-coded nibbles
};
struct BlockIQ5_KS {
  uint8_t scales[kQK_K / 32];
  uint8_t qs[kQK_K / 2];  // as IQ5_K
  uint8_t qh[kQK_K / 8];
};
struct BlockIQ2_KS {
  uint16_t extra;              // bits 0-7 value table per 32, bits 8-15 fifth scale bit per 32
  uint8_t scales[kQK_K / 64];  // 4 low scale bits per 32 (offset 16)
  uint8_t qs[kQK_K / 4];       // element 128h + 32s + l at bits 2s of qs[32h + l]
};
struct BlockIQ3_KS {
  uint16_t extra;              // bits 0-7 fifth scale bit per 32, bits 8-15 value table per 32
  uint8_t scales[kQK_K / 64];  // group g < 4 low nibble of scales[g], g >= 4 high nibble of scales[g-4]
  uint8_t qs[kQK_K / 4];
  uint8_t qh[kQK_K / 8];  // third bit: element 32g + l at bit g of qh[l]
};
struct BlockIQ2_KL {
  uint16_t scales_h;  // 2 high bits per 32-group scale (offset 32)
  uint8_t scales_l[kQK_K / 64];
  uint8_t qs[kQK_K / 4];   // per 64: 16 bytes of two 4-bit pair indices
  uint8_t qh[kQK_K / 16];  // fifth index bit: pair j of group g at bit g of qh[j]
};
static_assert(sizeof(BlockQ6_0) == 26 && sizeof(BlockIQ2_K) == 76 && sizeof(BlockIQ3_K) == 110);
static_assert(sizeof(BlockIQ4_K) == 144 && sizeof(BlockIQ5_K) == 176 && sizeof(BlockIQ6_K) == 212);
static_assert(sizeof(BlockIQ4_KS) == 136 && sizeof(BlockIQ4_KSS) == 128 && sizeof(BlockIQ5_KS) == 168);
static_assert(sizeof(BlockIQ2_KS) == 70 && sizeof(BlockIQ3_KS) == 102 && sizeof(BlockIQ2_KL) == 86);

// ik_llama.cpp's trellis types (trellis.cpp describes their values). A row is a float scale
// followed by its super-blocks.
struct BlockIQ1_KT {
  uint8_t sh[kQK_K / 32];  // per 32: 4-bit scale index, high bits: bit 12 of each group's index
  uint8_t ql[kQK_K / 8];   // per group of 8: index bits 0-7
  uint8_t qh[kQK_K / 16];  // index bits 8-11 of groups g and g + 16 (low / high nibble)
};
struct BlockIQ2_KT {
  uint8_t scales[kQK_K / 64];  // 4-bit scale indices: blocks b (low nibble) and b + 4 (high)
  uint8_t ql[kQK_K / 4];       // 16-bit group indices, uint16 little-endian
};
struct BlockIQ3_KT {
  uint8_t scales[kQK_K / 64];  // 4-bit scales: blocks b (low nibble) and b + 4 (high)
  uint8_t ql[kQK_K / 4];       // 16-bit group indices of |x|
  uint8_t qh[kQK_K / 8];       // signs: element j of group g of block b at bit b of qh[8 (g % 4) + j]
};
struct BlockIQ4_KT {
  uint32_t qs[kQK_K / 8];  // 8 block words (scale, offset bit, 3 index bits per group), then
                           // 64 index bytes (bits 0-7), then 32 bytes of index bits 8-11
};
static_assert(sizeof(BlockIQ1_KT) == 56 && sizeof(BlockIQ2_KT) == 68 && sizeof(BlockIQ3_KT) == 100 &&
              sizeof(BlockIQ4_KT) == 128);

// The lattice i-quants (iquants.cpp describes their values).
struct BlockIQ2_XXS {
  uint16_t d;
  uint16_t qs[kQK_K / 8];  // per 32 values: 4 grid bytes, then 4 x 7 sign bits and a 4-bit scale
};
struct BlockIQ2_XS {
  uint16_t d;
  uint16_t qs[kQK_K / 8];  // 9-bit grid index | 7 sign bits << 9
  uint8_t scales[kQK_K / 32];
};
struct BlockIQ2_S {
  uint16_t d;
  uint8_t qs[kQK_K / 4];   // 32 low index bytes, then 32 sign bytes
  uint8_t qh[kQK_K / 32];  // 2 high index bits per group of 8
  uint8_t scales[kQK_K / 32];
};
struct BlockIQ3_XXS {
  uint16_t d;
  uint8_t qs[3 * kQK_K / 8];  // 64 grid bytes, then per 32 values a word of 4 x 7 sign bits + scale
};
struct BlockIQ3_S {
  uint16_t d;
  uint8_t qs[kQK_K / 4];
  uint8_t qh[kQK_K / 32];
  uint8_t signs[kQK_K / 8];
  uint8_t scales[kQK_K / 64];
};
struct BlockIQ1_S {
  uint16_t d;
  uint8_t qs[kQK_K / 8];
  uint16_t qh[kQK_K / 32];  // 4 x 3 high index bits, 3-bit scale, shift sign (bit 15)
};
struct BlockIQ1_M {
  uint8_t qs[kQK_K / 8];
  uint8_t qh[kQK_K / 16];      // per pair of groups: 3 high index bits + shift sign, twice
  uint8_t scales[kQK_K / 32];  // 4 words: 4 x 3-bit scales, fp16 d nibble in the top 4 bits
};
static_assert(sizeof(BlockIQ2_XXS) == 66 && sizeof(BlockIQ2_XS) == 74 && sizeof(BlockIQ2_S) == 82);
static_assert(sizeof(BlockIQ3_XXS) == 98 && sizeof(BlockIQ3_S) == 110);
static_assert(sizeof(BlockIQ1_S) == 50 && sizeof(BlockIQ1_M) == 56);

// The 16 non-linear levels of IQ4_NL / IQ4_XS.
inline constexpr int8_t kIQ4NLValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
// E2M1 (FP4) values times two, so they are integers; the scale is halved to compensate.
inline constexpr int8_t kMXFP4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 2^(e-128): the E8M0 exponent e scaled by 1/2 (because kMXFP4Values are doubled). e = 0 and 1
// are the subnormals 2^-128 and 2^-127; e = 255 is 2^127 (the format's NaN is not special-cased,
// as in ggml).
static inline float e8m0_to_fp32_half(uint8_t e) {
  uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// An NVFP4 sub-block scale: unsigned E4M3 (4 exponent bits, bias 7, 3 mantissa bits; bit 7 is
// ignored) times 1/2, because kMXFP4Values are doubled. 0x00 and 0x7F (NaN) are 0, as in ggml.
static inline float ue4m3_to_fp32_half(uint8_t x) {
  if (x == 0 || x == 0x7F) return 0.0f;
  const uint32_t exp = (x >> 3) & 0x0F, man = x & 7;
  if (exp == 0) return static_cast<float>(man) * (1.0f / 1024.0f);  // subnormal: man * 2^-9 / 2
  const uint32_t bits = ((exp + 119) << 23) | (man << 20);          // (1 + man/8) * 2^(exp-7) / 2
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest, ties to even, for |x| < 2^22, by the float magic-number trick ggml uses
// (so that quantizers agree with it bit for bit).
static inline int nearest_int(float x) {
  float v = x + 12582912.f;  // 1.5 * 2^23
  int32_t i;
  std::memcpy(&i, &v, 4);
  return (i & 0x007fffff) - 0x00400000;
}

// The 256 unsigned 6-bit levels (q + 32) of a Q6_K block, in ggml's element order: element
// 128h + r takes the low nibble (r / 64) of ql[64h + r % 64] and 2 high bits at bit 2 (r / 32) of
// qh[32h + r % 32].
static inline void q6_k_levels(const BlockQ6_K& b, uint8_t* q) {
  for (int e = 0; e < kQK_K; ++e) {
    const int h = e / 128, r = e % 128;
    const int lo = (b.ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0F;
    const int hi = (b.qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
    q[e] = static_cast<uint8_t>(lo | hi << 4);
  }
}

// Q4_K / Q5_K pack 8 scales and 8 mins of 6 bits into 12 bytes:
//   bytes 0-3: scale j (j<4) in bits 0-5, high 2 bits of scale j+4 in bits 6-7
//   bytes 4-7: min j (j<4) in bits 0-5, high 2 bits of min j+4 in bits 6-7
//   bytes 8-11: low 4 bits of scale j+4 (bits 0-3) and of min j+4 (bits 4-7)
static inline void unpack_k4_scales(const uint8_t* packed, uint8_t* scales, uint8_t* mins) {
  for (int j = 0; j < 4; ++j) {
    scales[j] = packed[j] & 63;
    mins[j] = packed[j + 4] & 63;
    scales[j + 4] = (packed[j + 8] & 0x0F) | ((packed[j] >> 6) << 4);
    mins[j + 4] = (packed[j + 8] >> 4) | ((packed[j + 4] >> 6) << 4);
  }
}
static inline void pack_k4_scales(const uint8_t* scales, const uint8_t* mins, uint8_t* packed) {
  for (int j = 0; j < 4; ++j) {
    packed[j] = (scales[j] & 63) | ((scales[j + 4] >> 4) << 6);
    packed[j + 4] = (mins[j] & 63) | ((mins[j + 4] >> 4) << 6);
    packed[j + 8] = (scales[j + 4] & 0x0F) | ((mins[j + 4] & 0x0F) << 4);
  }
}

// Q3_K's 16 six-bit scales (stored offset by 32): low 4 bits in bytes 0-7 (scale j in the
// low nibble of byte j%8 for j<8, high nibble for j>=8), high 2 bits in bytes 8-11
// (scale j at byte 8 + j%4, bit 2*(j/4)).
static inline void unpack_q3_k_scales(const uint8_t* packed, int8_t* scales) {
  for (int j = 0; j < 16; ++j) {
    int lo = (packed[j % 8] >> (4 * (j / 8))) & 0x0F;
    int hi = (packed[8 + j % 4] >> (2 * (j / 4))) & 0x03;
    scales[j] = static_cast<int8_t>((lo | (hi << 4)) - 32);
  }
}

}  // namespace mla::quant
