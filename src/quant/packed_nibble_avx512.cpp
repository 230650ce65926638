// AVX-512 VNNI GEMM over the packed groups of the 4-bit-index types (layouts in packed_nibble.h).
// One 64-byte load holds 4 columns' nibbles of the 16 rows twice (low: columns 4g.., high:
// 16+4g..); the non-linear types map nibbles to level + 128 with vpshufb. Each block's int32 sums
// start from -offset x the activation sum, so they end as the exact sum of level x a. The float
// steps per (row, token) are the scalar twin's, in its order (packed_nibble.cpp), so results are
// bit-identical to it whatever the number of tokens in the call.
#include <immintrin.h>
// GCC 12 flags the deliberately undefined pass-through operand of its own AVX-512 intrinsics.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <array>
#include <cstring>

#include "quant/kernels.h"
#include "quant/packed_avx512.h"
#include "quant/packed_nibble.h"

namespace mla::quant {
namespace {

// level + 128 for each nibble value of kType's table, made once at compile time.
template <GgmlType kType>
struct ShiftedTable {
  static constexpr auto bytes = [] {
    std::array<uint8_t, 16> t{};
    for (int i = 0; i < 16; ++i) t[i] = static_cast<uint8_t>(nibble_packed_spec(kType).table[i] + 128);
    return t;
  }();
};

// kType's shifted table in every 128-bit lane (vpshufb looks up within lanes).
template <GgmlType kType>
inline __m512i shifted_table() {
  return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ShiftedTable<kType>::bytes.data())));
}

// The 16 rows' scales: fp16, or E8M0 exponents e as 2^(e-128) (0x00200000 << e below e = 2).
template <GgmlType kType>
inline __m512 load_scales(const uint8_t* blk) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk));
  if constexpr (kType != GgmlType::MXFP4) {
    return _mm512_cvtph_ps(raw);
  } else {
    const __m512i e = _mm512_cvtepu16_epi32(raw);  // the exponent byte, then a zero byte
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i tiny = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    const __mmask16 small = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, normal, tiny));
  }
}

// Bits 2g..2g+1 of each byte at bits 4-5 (other bits: garbage to mask off).
inline __m512i to_bits45(__m512i v, int g) {
  switch (g) {
    case 0:
      return _mm512_slli_epi16(v, 4);
    case 1:
      return _mm512_slli_epi16(v, 2);
    case 2:
      return v;
    default:
      return _mm512_srli_epi16(v, 2);
  }
}

// The unsigned operands of k-group g: columns 4g.. (lo) and 16+4g.. (hi).
template <GgmlType kType>
inline void operands(const uint8_t* quants, const uint8_t* bits_p, int g, __m512i tbl, __m512i& lo, __m512i& hi) {
  constexpr NibblePackedSpec sp = nibble_packed_spec(kType);
  const __m512i low = _mm512_set1_epi8(0x0F);
  const __m512i raw = load512(quants + 64 * g);
  lo = _mm512_and_si512(raw, low);
  hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low);
  if constexpr (sp.lookup) {
    lo = _mm512_shuffle_epi8(tbl, lo);
    hi = _mm512_shuffle_epi8(tbl, hi);
  }
  if constexpr (sp.high_bits == 1) {
    // Bit g (bit 4+g) of each byte moved to bit 4; bits crossing bytes are masked off.
    const __m512i bits = load512(bits_p), fifth = _mm512_set1_epi8(0x10);
    lo = _mm512_or_si512(lo, _mm512_and_si512(_mm512_slli_epi16(bits, 4 - g), fifth));
    hi = _mm512_or_si512(hi, _mm512_and_si512(g == 0 ? bits : _mm512_srli_epi16(bits, g), fifth));
  }
  if constexpr (sp.high_bits == 2) {
    // Bits 2g..2g+1 of each byte moved to bits 4-5; bits crossing bytes are masked off.
    const __m512i top = _mm512_set1_epi8(0x30);
    lo = _mm512_or_si512(lo, _mm512_and_si512(to_bits45(load512(bits_p), g), top));
    hi = _mm512_or_si512(hi, _mm512_and_si512(to_bits45(load512(bits_p + 64), g), top));
  }
}

// 32-column blocks against Q8_0 (extra: -128 x sum(a) per block, int32).
template <GgmlType kType, int NT>
void gemm32(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, float* out) {
  constexpr NibblePackedSpec sp = nibble_packed_spec(kType);
  constexpr int64_t kBytes = sp.bytes();
  constexpr int kLines = static_cast<int>((kBytes + 63) / 64);
  constexpr int kShift = sp.offset == 128  ? 0
                         : sp.offset == 32 ? 2
                         : sp.offset == 16 ? 3
                                           : 4;  // -128 x sum -> -offset x sum
  const int64_t nb = n_cols / kQK;
  const BlockQ8_0* a[NT];
  const uint8_t* ex[NT];
  for (int t = 0; t < NT; ++t) {
    a[t] = reinterpret_cast<const BlockQ8_0*>(act + t * act_stride);
    ex[t] = act + t * act_stride + nb * static_cast<int64_t>(sizeof(BlockQ8_0));
  }
  __m512i tbl = _mm512_setzero_si512();
  if constexpr (sp.lookup) tbl = shifted_table<kType>();
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * kBytes;
    for (int l = 0; l < kLines; ++l)
      _mm_prefetch(reinterpret_cast<const char*>(blk + 4 * kBytes + 64 * l), _MM_HINT_T0);
    __m512i s0[NT], s1[NT];
    for (int t = 0; t < NT; ++t) {
      int32_t e;
      std::memcpy(&e, ex[t] + 4 * b, 4);
      s0[t] = _mm512_set1_epi32(e >> kShift);  // exact: e is a multiple of 128
      s1[t] = _mm512_setzero_si512();
    }
#pragma GCC unroll 8
    for (int g = 0; g < 4; ++g) {
      __m512i lo, hi;
      operands<kType>(blk + sp.quants_offset(), blk + sp.bits_offset(), g, tbl, lo, hi);
      for (int t = 0; t < NT; ++t) {
        s0[t] = _mm512_dpbusd_epi32(s0[t], lo, bcast32(a[t][b].qs + 4 * g));
        s1[t] = _mm512_dpbusd_epi32(s1[t], hi, bcast32(a[t][b].qs + 16 + 4 * g));
      }
    }
    const __m512 dw = load_scales<kType>(blk);
    for (int t = 0; t < NT; ++t) {
      const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(_cvtsh_ss(a[t][b].d)));
      acc[t] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(_mm512_add_epi32(s0[t], s1[t])), acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(out + 16 * t, acc[t]);
}

// IQ4_XS against Q8_K: each 32-column sub-block starts from -128 x its activation sum (bsums),
// then times the row's signed scale.
template <int NT>
void gemm_iq4_xs(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, float* out) {
  constexpr NibblePackedSpec sp = nibble_packed_spec(GgmlType::IQ4_XS);
  constexpr int64_t kBytes = sp.bytes();
  constexpr int kLines = static_cast<int>((kBytes + 63) / 64 + 7) / 8;  // per sub-block
  const int64_t nb = n_cols / kQK_K;
  const BlockQ8_K* a[NT];
  for (int t = 0; t < NT; ++t) a[t] = reinterpret_cast<const BlockQ8_K*>(act + t * act_stride);
  const __m512i tbl = shifted_table<GgmlType::IQ4_XS>();
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * kBytes;
    __m512i tot[NT];
    for (int t = 0; t < NT; ++t) tot[t] = _mm512_setzero_si512();
    for (int s = 0; s < 8; ++s) {
      for (int l = 0; l < kLines; ++l)
        _mm_prefetch(reinterpret_cast<const char*>(blk + kBytes + 64 * (kLines * s + l)), _MM_HINT_T0);
      __m512i s0[NT], s1[NT];
      for (int t = 0; t < NT; ++t) {
        s0[t] = _mm512_set1_epi32(-128 * (a[t][b].bsums[2 * s] + a[t][b].bsums[2 * s + 1]));
        s1[t] = _mm512_setzero_si512();
      }
      const uint8_t* quants = blk + sp.quants_offset() + 256 * s;
#pragma GCC unroll 8
      for (int g = 0; g < 4; ++g) {
        __m512i lo, hi;
        operands<GgmlType::IQ4_XS>(quants, nullptr, g, tbl, lo, hi);
        for (int t = 0; t < NT; ++t) {
          s0[t] = _mm512_dpbusd_epi32(s0[t], lo, bcast32(a[t][b].qs + 32 * s + 4 * g));
          s1[t] = _mm512_dpbusd_epi32(s1[t], hi, bcast32(a[t][b].qs + 32 * s + 16 + 4 * g));
        }
      }
      const __m512i ls = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 32 + 16 * s)));
      for (int t = 0; t < NT; ++t)
        tot[t] = _mm512_add_epi32(tot[t], _mm512_mullo_epi32(_mm512_add_epi32(s0[t], s1[t]), ls));
    }
    const __m512 dw = load_scales<GgmlType::IQ4_XS>(blk);
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(a[t][b].d)), _mm512_cvtepi32_ps(tot[t]), acc[t]);
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(out + 16 * t, acc[t]);
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

PackedGemmFn packed_gemm_nibble_avx512_fn(GgmlType t) {
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
