// AVX2 dot products for ik_llama.cpp's non-trellis quants (iqk_blocks.h describes the layouts).
// Q8_K types: each 32-element chunk's indices are unpacked with shifts and masks, mapped to their
// levels by byte shuffles over the value tables, multiplied with the activation quants in int8
// and scaled per group in int32 (vpmaddubsw, then vpmaddwd by the group scales), so a super-block's sum is exact in
// integers; only its factor d * d_a is applied in float and super-blocks are summed in double, as in the scalar
// reference (iqk_ref.cpp), which these kernels therefore equal bit for bit. Q6_0 against Q8_0:
// per 32-element block an int32 sum, accumulated in float lanes like the other Q8_0 kernels.
// IQ6_K's 6-bit levels take four shuffles and three blends per chunk.
#include <immintrin.h>

#include "quant/iqk_blocks.h"
#include "quant/iqk_kernels.h"
#include "quant/kernels.h"
#include "quant/simd_avx2.h"

namespace mla::quant {
namespace {

using avx2::dot_i8_quads;

inline __m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m128i load16(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
inline __m256i table2(const int8_t* lo_lane, const int8_t* hi_lane) {
  return _mm256_set_m128i(load16(hi_lane), load16(lo_lane));
}
inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// Sixteen-byte tables padded from short level tables (a shuffle reads all 16 entries).
struct Tables {
  alignas(16) int8_t iq2[2][16];  // IQ2 levels, plain and shifted
  alignas(16) int8_t iq3[2][16];
  alignas(16) int8_t kl_lo[32];  // IQ2_KL pair levels: first and second element
  alignas(16) int8_t kl_hi[32];
  Tables() {
    for (int s = 0; s < 2; ++s)
      for (int i = 0; i < 16; ++i) {
        iq2[s][i] = kIQ2NLValues[4 * s + (i & 3)];
        iq3[s][i] = kIQ3NLValues[8 * s + (i & 7)];
      }
    for (int i = 0; i < 32; ++i) {
      kl_lo[i] = static_cast<int8_t>(kIQ2KLPairs[i] & 0xff);
      kl_hi[i] = static_cast<int8_t>(kIQ2KLPairs[i] >> 8);
    }
  }
};
const Tables& tables() {
  static const Tables t;
  return t;
}

// Levels of a 32-entry table (t: its two 16-byte halves, per lane) at 5-bit indices.
inline __m256i lookup32(__m256i lo_half, __m256i hi_half, __m256i idx) {
  const __m256i nib = _mm256_and_si256(idx, _mm256_set1_epi8(0x0f));
  const __m256i high = _mm256_cmpeq_epi8(_mm256_and_si256(idx, _mm256_set1_epi8(0x10)), _mm256_set1_epi8(0x10));
  return _mm256_blendv_epi8(_mm256_shuffle_epi8(lo_half, nib), _mm256_shuffle_epi8(hi_half, nib), high);
}

// The group scales as int16 for chunk k: the low lane multiplies the pair sums of elements 0-15,
// the high lane those of 16-31 (groups of 16: scales 2k and 2k+1; groups of 32: scale k twice).
inline __m256i chunk_scales(const int16_t* scale, int n_groups, int k) {
  return n_groups == 16 ? _mm256_set_m128i(_mm_set1_epi16(scale[2 * k + 1]), _mm_set1_epi16(scale[2 * k]))
                        : _mm256_set1_epi16(scale[k]);
}

// One super-block: levels (8 chunks of 32) times the activation quants, scaled per group. The
// int16 pair sums (|level| <= 127, |a| <= 127: below 2^15) are multiplied by their group scale
// and added in pairs by one vpmaddwd (below 2^24), so the int32 sum is exact.
inline int32_t block_sum(const __m256i lv[8], const int16_t* scale, int n_groups, const int8_t* a) {
  __m256i acc = _mm256_setzero_si256();
  for (int k = 0; k < 8; ++k) {
    const __m256i y = load32(reinterpret_cast<const uint8_t*>(a) + 32 * k);
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(lv[k], lv[k]), _mm256_sign_epi8(y, lv[k]));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, chunk_scales(scale, n_groups, k)));
  }
  return hsum_i32(acc);
}

// ---- per-type decoders: 8 chunks of levels and the group scales ----------------------------

// 2-bit indices of chunk k (elements 32k .. 32k+31): bits 2(k%4) of qs[32(k/4) + l].
inline __m256i idx2(const uint8_t* qs, int k) {
  return _mm256_and_si256(_mm256_srli_epi16(load32(qs + 32 * (k / 4)), 2 * (k % 4)), _mm256_set1_epi8(3));
}
// Third index bit of chunk k, as 4: bit k of qh[l].
inline __m256i bit3(__m256i qh, int k) {
  return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, k), _mm256_set1_epi8(1)), 2);
}

void levels(const BlockIQ2_K& b, __m256i lv[8], int16_t* scale) {
  const Tables& t = tables();
  for (int g = 0; g < 16; ++g) scale[g] = static_cast<int16_t>(((b.scales[g / 2] >> (4 * (g % 2))) & 0xf) - 8);
  for (int k = 0; k < 8; ++k)
    lv[k] = _mm256_shuffle_epi8(table2(t.iq2[(b.extra >> (2 * k)) & 1], t.iq2[(b.extra >> (2 * k + 1)) & 1]),
                                idx2(b.qs, k));
}

void levels(const BlockIQ2_KS& b, __m256i lv[8], int16_t* scale) {
  const Tables& t = tables();
  for (int g = 0; g < 8; ++g)
    scale[g] =
        static_cast<int16_t>((((b.scales[g / 2] >> (4 * (g % 2))) & 0xf) | ((b.extra >> (8 + g)) & 1) << 4) - 16);
  for (int k = 0; k < 8; ++k) {
    const int8_t* tab = t.iq2[(b.extra >> k) & 1];
    lv[k] = _mm256_shuffle_epi8(table2(tab, tab), idx2(b.qs, k));
  }
}

void levels(const BlockIQ3_K& b, __m256i lv[8], int16_t* scale) {
  const Tables& t = tables();
  for (int g = 0; g < 16; ++g) {
    const int mag = 2 * ((b.scales_l[g / 2] >> (4 * (g % 2))) & 0xf) + 1;
    scale[g] = static_cast<int16_t>((b.scales_h >> g) & 1 ? -mag : mag);
  }
  const __m256i qh = load32(b.qh);
  for (int k = 0; k < 8; ++k) {
    const __m256i idx = _mm256_or_si256(idx2(b.qs, k), bit3(qh, k));
    lv[k] = _mm256_shuffle_epi8(table2(t.iq3[(b.extra >> (2 * k)) & 1], t.iq3[(b.extra >> (2 * k + 1)) & 1]), idx);
  }
}

void levels(const BlockIQ3_KS& b, __m256i lv[8], int16_t* scale) {
  const Tables& t = tables();
  for (int g = 0; g < 8; ++g)
    scale[g] = static_cast<int16_t>((((b.scales[g % 4] >> (4 * (g / 4))) & 0xf) | ((b.extra >> g) & 1) << 4) - 16);
  const __m256i qh = load32(b.qh);
  for (int k = 0; k < 8; ++k) {
    const int8_t* tab = t.iq3[(b.extra >> (8 + k)) & 1];
    lv[k] = _mm256_shuffle_epi8(table2(tab, tab), _mm256_or_si256(idx2(b.qs, k), bit3(qh, k)));
  }
}

// 4-bit indices of a 32-element sub-block laid out as IQ4_NL (16 bytes).
inline __m256i idx4(const uint8_t* qs) { return avx2::unpack_nibbles_32(qs); }

void levels(const BlockIQ4_K& b, __m256i lv[8], int16_t* scale) {
  for (int g = 0; g < 16; ++g) {
    const int lo = (b.scales_l[g / 2] >> (4 * (g % 2))) & 0xf;
    const int hi = (b.scales_h[g / 4] >> (2 * (g % 4))) & 3;
    scale[g] = static_cast<int16_t>((lo | hi << 4) - 32);
  }
  for (int k = 0; k < 8; ++k) {
    const __m256i tab =
        table2(kIQ4KValues + 16 * ((b.extra >> (2 * k)) & 1), kIQ4KValues + 16 * ((b.extra >> (2 * k + 1)) & 1));
    lv[k] = _mm256_shuffle_epi8(tab, idx4(b.qs + 16 * k));
  }
}

void levels(const BlockIQ4_KS& b, __m256i lv[8], int16_t* scale) {
  for (int k = 0; k < 8; ++k) {
    scale[k] = static_cast<int16_t>((b.scales[k] & 254) - 127);
    const int8_t* tab = kIQ4KValues + 16 * (b.scales[k] & 1);
    lv[k] = _mm256_shuffle_epi8(table2(tab, tab), idx4(b.qs + 16 * k));
  }
}

void levels(const BlockIQ4_KSS& b, __m256i lv[8], int16_t* scale) {
  for (int k = 0; k < 8; ++k) {
    // Bit 0 of each of the 8 words is a scale bit; the rest, Gray-decoded, are the nibbles.
    const __m128i w = load16(b.qs + 8 * k);
    const int ls = _mm_movemask_epi8(_mm_packs_epi16(_mm_slli_epi16(w, 15), _mm_setzero_si128())) & 0xff;
    __m128i v = _mm_and_si128(w, _mm_set1_epi16(static_cast<int16_t>(0xfffe)));
    v = _mm_xor_si128(v, _mm_srli_epi16(v, 1));
    scale[k] = static_cast<int16_t>((ls & 254) - 127);
    const int8_t* tab = kIQ4KValues + 16 * (ls & 1);
    const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0f));
    lv[k] = _mm256_shuffle_epi8(table2(tab, tab), nib);
  }
}

// IQ5_K / IQ5_KS 5-bit indices of chunk k: nibble (k%2) of qs[32(k/2) + l], fifth bit k of qh[l].
inline __m256i idx5(const uint8_t* qs, __m256i qh, int k) {
  const __m256i nib =
      _mm256_and_si256(_mm256_srli_epi16(load32(qs + 32 * (k / 2)), 4 * (k % 2)), _mm256_set1_epi8(0x0f));
  return _mm256_or_si256(nib, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, k), _mm256_set1_epi8(1)), 4));
}

void levels(const BlockIQ5_K& b, __m256i lv[8], int16_t* scale) {
  for (int g = 0; g < 16; ++g) {
    const int lo = (b.scales_l[g / 2] >> (4 * (g % 2))) & 0xf;
    const int hi = (b.scales_h[g / 4] >> (2 * (g % 4))) & 3;
    scale[g] = static_cast<int16_t>((lo | hi << 4) - 32);
  }
  const __m256i qh = load32(b.qh);
  for (int k = 0; k < 8; ++k) {
    const int8_t* t0 = kIQ5NLValues + 32 * ((b.extra >> (2 * k)) & 1);
    const int8_t* t1 = kIQ5NLValues + 32 * ((b.extra >> (2 * k + 1)) & 1);
    lv[k] = lookup32(table2(t0, t1), table2(t0 + 16, t1 + 16), idx5(b.qs, qh, k));
  }
}

void levels(const BlockIQ5_KS& b, __m256i lv[8], int16_t* scale) {
  const __m256i qh = load32(b.qh);
  for (int k = 0; k < 8; ++k) {
    scale[k] = static_cast<int16_t>((b.scales[k] & 254) - 127);
    const int8_t* t = kIQ5NLValues + 32 * (b.scales[k] & 1);
    lv[k] = lookup32(table2(t, t), table2(t + 16, t + 16), idx5(b.qs, qh, k));
  }
}

// IQ6_K: the 64-entry table half chosen per 16 elements by the extra bit, indexed by the low
// nibble (four 16-entry quarters) and two high bits, bits 2(k%4) of qh[32(k/4) + l] for chunk k.
void levels(const BlockIQ6_K& b, __m256i lv[8], int16_t* scale) {
  for (int g = 0; g < 16; ++g) scale[g] = b.scales[g];
  const __m256i m4 = _mm256_set1_epi8(0x0f), b4 = _mm256_set1_epi8(0x10), b5 = _mm256_set1_epi8(0x20);
  for (int k = 0; k < 8; ++k) {
    const int8_t* t0 = kIQ6NLValues + 64 * ((b.extra >> (2 * k)) & 1);
    const int8_t* t1 = kIQ6NLValues + 64 * ((b.extra >> (2 * k + 1)) & 1);
    const __m256i nib = _mm256_and_si256(_mm256_srli_epi16(load32(b.qs + 32 * (k / 2)), 4 * (k % 2)), m4);
    const __m256i top = _mm256_srli_epi16(load32(b.qh + 32 * (k / 4)), 2 * (k % 4));  // bits 0-1
    const __m256i bit4 = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_slli_epi16(top, 4), b4), b4);
    const __m256i bit5 = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_slli_epi16(top, 4), b5), b5);
    const __m256i q01 = _mm256_blendv_epi8(_mm256_shuffle_epi8(table2(t0, t1), nib),
                                           _mm256_shuffle_epi8(table2(t0 + 16, t1 + 16), nib), bit4);
    const __m256i q23 = _mm256_blendv_epi8(_mm256_shuffle_epi8(table2(t0 + 32, t1 + 32), nib),
                                           _mm256_shuffle_epi8(table2(t0 + 48, t1 + 48), nib), bit4);
    lv[k] = _mm256_blendv_epi8(q01, q23, bit5);
  }
}

void levels(const BlockIQ2_KL& b, __m256i lv[8], int16_t* scale) {
  const Tables& t = tables();
  const __m256i lo_half = table2(t.kl_lo, t.kl_lo), hi_half = table2(t.kl_lo + 16, t.kl_lo + 16);
  const __m256i lo_half2 = table2(t.kl_hi, t.kl_hi), hi_half2 = table2(t.kl_hi + 16, t.kl_hi + 16);
  const __m128i qh = load16(b.qh);
  for (int g = 0; g < 8; ++g) {
    const int lo = (b.scales_l[g % 4] >> (4 * (g / 4))) & 0xf;
    scale[g] = static_cast<int16_t>((lo | ((b.scales_h >> (2 * g)) & 3) << 4) - 32);
  }
  for (int k = 0; k < 8; ++k) {
    // 16 pair indices, duplicated in both lanes; first elements from one table, second from the other.
    const __m128i nib = _mm_and_si128(_mm_srli_epi16(load16(b.qs + 16 * (k / 2)), 4 * (k % 2)), _mm_set1_epi8(0x0f));
    const __m128i bit = _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(qh, k), _mm_set1_epi8(1)), 4);
    const __m128i idx = _mm_or_si128(nib, bit);
    const __m256i idx2x = _mm256_set_m128i(idx, idx);
    const __m256i first = lookup32(lo_half, hi_half, idx2x);
    const __m256i second = lookup32(lo_half2, hi_half2, idx2x);
    const __m128i f = _mm256_castsi256_si128(first), s = _mm256_castsi256_si128(second);
    lv[k] = _mm256_set_m128i(_mm_unpackhi_epi8(f, s), _mm_unpacklo_epi8(f, s));
  }
}

// ---- the dot kernels --------------------------------------------------------------------------

enum class RowScale { Block, F32, F16 };

template <typename Block, RowScale S, int NGroups>
float dot_iqk(int64_t n, const void* w, const void* a) {
  const uint8_t* row = static_cast<const uint8_t*>(w);
  float row_d = 0;
  if constexpr (S == RowScale::F32) {
    row_d = iqk_row_scale_f32(row);
    row += 4;
  } else if constexpr (S == RowScale::F16) {
    row_d = avx2::half_to_float(*reinterpret_cast<const uint16_t*>(row));
    row += 2;
  }
  const auto* x = reinterpret_cast<const Block*>(row);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  __m256i lv[8];
  int16_t scale[16];
  double sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    levels(x[i], lv, scale);
    const int32_t s = block_sum(lv, scale, NGroups, y[i].qs);
    float d;
    if constexpr (S == RowScale::Block)
      d = avx2::half_to_float(x[i].d);
    else
      d = row_d;
    sum += static_cast<double>(d * y[i].d) * static_cast<double>(s);
  }
  return static_cast<float>(sum);
}

float dot_q6_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ6_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  const __m256i m3 = _mm256_set1_epi8(3), m32 = _mm256_set1_epi8(32);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK; ++i) {
    // High bits: element j (j < 16) at bits 4(j/8) of qh[j%8], element j+16 two bits above.
    const __m128i h8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x[i].qh));
    const __m128i h16 = _mm_unpacklo_epi64(h8, _mm_srli_epi16(h8, 4));
    const __m256i hi = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(h16, 2), h16), m3);
    const __m256i q = _mm256_sub_epi8(_mm256_or_si256(avx2::unpack_nibbles_32(x[i].qs), _mm256_slli_epi16(hi, 4)), m32);
    const __m256i p = dot_i8_quads(q, load32(reinterpret_cast<const uint8_t*>(y[i].qs)));
    const float d = avx2::half_to_float(x[i].d) * avx2::half_to_float(y[i].d);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(p), acc);
  }
  return avx2::hsum(acc);
}

}  // namespace

VecDotFn vec_dot_iqk_avx2_fn(GgmlType t) {
  switch (t) {
    case GgmlType::Q6_0:
      return dot_q6_0;
    case GgmlType::IQ2_K:
      return dot_iqk<BlockIQ2_K, RowScale::Block, 16>;
    case GgmlType::IQ3_K:
      return dot_iqk<BlockIQ3_K, RowScale::Block, 16>;
    case GgmlType::IQ4_K:
      return dot_iqk<BlockIQ4_K, RowScale::Block, 16>;
    case GgmlType::IQ5_K:
      return dot_iqk<BlockIQ5_K, RowScale::Block, 16>;
    case GgmlType::IQ6_K:
      return dot_iqk<BlockIQ6_K, RowScale::Block, 16>;
    case GgmlType::IQ4_KS:
      return dot_iqk<BlockIQ4_KS, RowScale::F32, 8>;
    case GgmlType::IQ4_KSS:
      return dot_iqk<BlockIQ4_KSS, RowScale::F32, 8>;
    case GgmlType::IQ5_KS:
      return dot_iqk<BlockIQ5_KS, RowScale::F32, 8>;
    case GgmlType::IQ2_KS:
      return dot_iqk<BlockIQ2_KS, RowScale::F16, 8>;
    case GgmlType::IQ3_KS:
      return dot_iqk<BlockIQ3_KS, RowScale::F16, 8>;
    case GgmlType::IQ2_KL:
      return dot_iqk<BlockIQ2_KL, RowScale::F16, 8>;
    default:
      return nullptr;
  }
}

}  // namespace mla::quant
