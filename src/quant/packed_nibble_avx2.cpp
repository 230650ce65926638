// AVX2 GEMM over the packed groups of the 4-bit-index types (layouts in packed_nibble.h), for CPUs
// without AVX-512 VNNI; the entries are read as two halves of 8 rows (packed_avx2.h). The float
// steps per (row, token) are the scalar twin's, in its order (packed_nibble.cpp), so results are
// bit-identical to it whatever the number of tokens in the call. The integer sums are exact:
//  - Q4_0 (nibble, 0..15), Q5_0 (0..31) and MXFP4 (its doubled E2M1 level + 16, 4..28) feed
//    vpmaddubsw unsigned; pair sums are at most 2 x 31 x 128, so up to 32767 / (2 x 15 x 128) = 8
//    (Q4_0) or 4 (Q5_0, MXFP4) of them add up in int16, and 2 for Q6_0 (0..63: 2 x 2 x 63 x 128
//    = 32256); each block starts from -offset x sum(a),
//    taken from the Q8_0 extra (-128 x sum, shifted);
//  - IQ4_NL and IQ4_XS (levels -127..113) put |a| unsigned and the level with a's sign signed:
//    |level| <= 127, so a pair sum is at most 2 x 128 x 127 whatever a is.
#include <immintrin.h>

#include <array>
#include <cstring>

#include "quant/kernels.h"
#include "quant/packed_avx2.h"
#include "quant/packed_nibble.h"

namespace mla::quant {
namespace {

using namespace avx2p;

// The unsigned operand offset this file uses per type (the layout's own offset is AVX-512's).
constexpr int avx2_offset(GgmlType t) {
  return t == GgmlType::Q4_0 ? 8 : t == GgmlType::Q5_0 || t == GgmlType::MXFP4 ? 16 : t == GgmlType::Q6_0 ? 32 : 0;
}

// The 16 nibble values' operands, made once at compile time: the level + offset (MXFP4), or the
// signed level (IQ4_NL, IQ4_XS: offset 0).
template <GgmlType kType>
struct Table {
  static constexpr auto bytes = [] {
    std::array<uint8_t, 16> t{};
    for (int i = 0; i < 16; ++i) t[i] = static_cast<uint8_t>(nibble_packed_spec(kType).table[i] + avx2_offset(kType));
    return t;
  }();
};

template <GgmlType kType>
inline __m256i table() {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(Table<kType>::bytes.data())));
}

// Rows 8h..8h+7's scales: fp16, or E8M0 exponents e as 2^(e-128) (0x00200000 << e below e = 2).
template <GgmlType kType>
inline __m256 load_scales(const uint8_t* blk, int h) {
  if constexpr (kType != GgmlType::MXFP4) {
    return f16x8(blk + 16 * h);
  } else {
    const __m256i e = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * h)));
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i tiny = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, tiny, small));
  }
}

// Bits 2g..2g+1 of each byte at bits 4-5 (other bits: garbage to mask off).
inline __m256i to_bits45(__m256i v, int g) {
  switch (g) {
    case 0:
      return _mm256_slli_epi16(v, 4);
    case 1:
      return _mm256_slli_epi16(v, 2);
    case 2:
      return v;
    default:
      return _mm256_srli_epi16(v, 2);
  }
}

// The operands of k-group g, half h: columns 4g.. (lo) and 16+4g.. (hi).
template <GgmlType kType>
inline void operands(const uint8_t* quants, const uint8_t* bits_p, int g, int h, __m256i tbl, __m256i& lo,
                     __m256i& hi) {
  constexpr NibblePackedSpec sp = nibble_packed_spec(kType);
  const __m256i low = _mm256_set1_epi8(0x0F);
  const __m256i raw = half(quants + 64 * g, h);
  lo = _mm256_and_si256(raw, low);
  hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
  if constexpr (sp.lookup) {
    lo = _mm256_shuffle_epi8(tbl, lo);
    hi = _mm256_shuffle_epi8(tbl, hi);
  }
  if constexpr (sp.high_bits == 1) {
    // Bit g (bit 4+g) of each byte moved to bit 4; bits crossing bytes are masked off.
    const __m256i bits = half(bits_p, h), fifth = _mm256_set1_epi8(0x10);
    lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(bits, 4 - g), fifth));
    hi = _mm256_or_si256(hi, _mm256_and_si256(g == 0 ? bits : _mm256_srli_epi16(bits, g), fifth));
  }
  if constexpr (sp.high_bits == 2) {
    // Bits 2g..2g+1 of each byte moved to bits 4-5; bits crossing bytes are masked off.
    const __m256i top = _mm256_set1_epi8(0x30);
    lo = _mm256_or_si256(lo, _mm256_and_si256(to_bits45(half(bits_p, h), g), top));
    hi = _mm256_or_si256(hi, _mm256_and_si256(to_bits45(half(bits_p + 64, h), g), top));
  }
}

// Signed level x a through vpmaddubsw (|a| unsigned, level with a's sign): int16 pairs.
inline __m256i signed_pairs(__m256i level, __m256i a) {
  return _mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(level, a));
}

// 32-column blocks against Q8_0 (extra: -128 x sum(a) per block, int32).
template <GgmlType kType, int NT>
void gemm32(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, float* out) {
  constexpr NibblePackedSpec sp = nibble_packed_spec(kType);
  constexpr int64_t kBytes = sp.bytes();
  constexpr int kLines = static_cast<int>((kBytes + 63) / 64);
  constexpr int kOffset = avx2_offset(kType);
  constexpr int kShift = kOffset == 8 ? 4 : kOffset == 16 ? 3 : 2;  // -128 x sum -> -offset x sum
  constexpr int kRun = kOffset == 8 ? 4 : kOffset == 16 ? 2 : 1;    // k-groups (2 products each) summed in int16
  const int64_t nb = n_cols / kQK;
  const BlockQ8_0* a[NT];
  const uint8_t* ex[NT];
  for (int t = 0; t < NT; ++t) {
    a[t] = reinterpret_cast<const BlockQ8_0*>(act + t * act_stride);
    ex[t] = act + t * act_stride + nb * static_cast<int64_t>(sizeof(BlockQ8_0));
  }
  __m256i tbl = _mm256_setzero_si256();
  if constexpr (sp.lookup) tbl = table<kType>();
  __m256 acc[2][NT];
  zero_halves(acc);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * kBytes;
    for (int l = 0; l < kLines; ++l)
      _mm_prefetch(reinterpret_cast<const char*>(blk + 4 * kBytes + 64 * l), _MM_HINT_T0);
    for (int h = 0; h < 2; ++h) {
      __m256i s[NT], p[NT];
      for (int t = 0; t < NT; ++t) {
        s[t] = _mm256_setzero_si256();
        if constexpr (kOffset != 0) s[t] = _mm256_set1_epi32(load_i32(ex[t] + 4 * b) >> kShift);  // exact: x128
        p[t] = _mm256_setzero_si256();
      }
      for (int g = 0; g < 4; ++g) {
        __m256i lo, hi;
        operands<kType>(blk + sp.quants_offset(), blk + sp.bits_offset(), g, h, tbl, lo, hi);
        for (int t = 0; t < NT; ++t) {
          const __m256i alo = bcast4(a[t][b].qs + 4 * g), ahi = bcast4(a[t][b].qs + 16 + 4 * g);
          if constexpr (kOffset == 0) {
            s[t] = _mm256_add_epi32(s[t], sum_pairs(signed_pairs(lo, alo)));
            s[t] = _mm256_add_epi32(s[t], sum_pairs(signed_pairs(hi, ahi)));
          } else {
            p[t] = _mm256_add_epi16(p[t], _mm256_maddubs_epi16(lo, alo));
            p[t] = _mm256_add_epi16(p[t], _mm256_maddubs_epi16(hi, ahi));
          }
        }
        if (kOffset != 0 && (g + 1) % kRun == 0)
          for (int t = 0; t < NT; ++t) {
            s[t] = _mm256_add_epi32(s[t], sum_pairs(p[t]));
            p[t] = _mm256_setzero_si256();
          }
      }
      const __m256 dw = load_scales<kType>(blk, h);
      for (int t = 0; t < NT; ++t) {
        const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(_cvtsh_ss(a[t][b].d)));
        acc[h][t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s[t]), acc[h][t]);
      }
    }
  }
  store_halves(acc, out);
}

// IQ4_XS against Q8_K: per 32-column sub-block the signed products, times the row's signed scale
// by vpmaddwd straight from the int16 pairs.
template <int NT>
void gemm_iq4_xs(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, float* out) {
  constexpr NibblePackedSpec sp = nibble_packed_spec(GgmlType::IQ4_XS);
  constexpr int64_t kBytes = sp.bytes();
  constexpr int kLines = static_cast<int>((kBytes + 63) / 64 + 7) / 8;  // per sub-block
  const int64_t nb = n_cols / kQK_K;
  const BlockQ8_K* a[NT];
  for (int t = 0; t < NT; ++t) a[t] = reinterpret_cast<const BlockQ8_K*>(act + t * act_stride);
  const __m256i tbl = table<GgmlType::IQ4_XS>();
  __m256 acc[2][NT];
  zero_halves(acc);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * kBytes;
    for (int h = 0; h < 2; ++h) {
      __m256i tot[NT];
      for (int t = 0; t < NT; ++t) tot[t] = _mm256_setzero_si256();
      for (int s = 0; s < 8; ++s) {
        if (h == 0)
          for (int l = 0; l < kLines; ++l)
            _mm_prefetch(reinterpret_cast<const char*>(blk + kBytes + 64 * (kLines * s + l)), _MM_HINT_T0);
        const __m256i ls = i8_pairs(blk + 32 + 16 * s + 8 * h);
        const uint8_t* quants = blk + sp.quants_offset() + 256 * s;
        for (int g = 0; g < 4; ++g) {
          __m256i lo, hi;
          operands<GgmlType::IQ4_XS>(quants, nullptr, g, h, tbl, lo, hi);
          for (int t = 0; t < NT; ++t) {
            const __m256i plo = signed_pairs(lo, bcast4(a[t][b].qs + 32 * s + 4 * g));
            const __m256i phi = signed_pairs(hi, bcast4(a[t][b].qs + 32 * s + 16 + 4 * g));
            tot[t] = _mm256_add_epi32(tot[t], _mm256_madd_epi16(plo, ls));
            tot[t] = _mm256_add_epi32(tot[t], _mm256_madd_epi16(phi, ls));
          }
        }
      }
      const __m256 dw = load_scales<GgmlType::IQ4_XS>(blk, h);
      add_scaled_sums<NT>(dw, a, b, tot, acc[h]);
    }
  }
  store_halves(acc, out);
}

// The kernel of kType as by_count's K.
template <GgmlType kType>
struct NibbleKernel {
  template <int NT>
  static void run(int64_t n, const uint8_t* g, const uint8_t* a, int64_t s, float* o) {
    if constexpr (kType == GgmlType::IQ4_XS)
      gemm_iq4_xs<NT>(n, g, a, s, o);
    else
      gemm32<kType, NT>(n, g, a, s, o);
  }
};

}  // namespace

PackedGemmFn packed_gemm_nibble_avx2_fn(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0:
      return by_count<NibbleKernel<GgmlType::Q4_0>>;
    case GgmlType::Q5_0:
      return by_count<NibbleKernel<GgmlType::Q5_0>>;
    case GgmlType::Q6_0:
      return by_count<NibbleKernel<GgmlType::Q6_0>>;
    case GgmlType::IQ4_NL:
      return by_count<NibbleKernel<GgmlType::IQ4_NL>>;
    case GgmlType::MXFP4:
      return by_count<NibbleKernel<GgmlType::MXFP4>>;
    case GgmlType::IQ4_XS:
      return by_count<NibbleKernel<GgmlType::IQ4_XS>>;
    default:
      return nullptr;
  }
}

}  // namespace mla::quant
