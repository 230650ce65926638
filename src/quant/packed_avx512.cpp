// AVX-512 VNNI GEMM over packed 16-row groups (layouts in packed.h). One zmm of weights holds 4
// consecutive columns of 16 rows; vpdpbusd against the 4 matching activation bytes broadcast to
// every lane adds them into the 16 rows' int32 sums. Each weight load serves NT tokens.
//
// Per (row, token) the float operations are those of packed_ref.cpp's twin, in the same order
// (one accumulator, blocks in order), so results are bit-identical to it and independent of NT.
// Integer sums are exact, so the kernels may split them into several chains for latency.
#include <immintrin.h>
// GCC 12 flags the deliberately undefined pass-through operand of its own AVX-512 intrinsics.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <cstring>

#include "quant/kernels.h"
#include "quant/packed_avx512.h"
#include "quant/packed_iqk.h"
#include "util/ggml_blocks.h"

namespace mla::quant {
namespace {

// The loops over sub-blocks and k-groups are unrolled (#pragma GCC unroll): rolled, GCC copied every
// per-token accumulator through a register move each step and kept the sub-block-dependent shifts as
// run-time branches (Q5_K's GEMM ran ~15% faster unrolled, Q2_K/Q3_K 7-11%).

// Q8_0x16 · Q8_0: weights stored as q + 128, so each block's int32 sums start from the
// activation extra -128 * sum(a) and end as the exact sum of q * a.
template <int NT>
void gemm_q8_0(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, float* out) {
  const int64_t nb = n_cols / kQK;
  const BlockQ8_0* a[NT];
  const uint8_t* ex[NT];  // the activation extras: int32 per block, unaligned
  for (int t = 0; t < NT; ++t) {
    a[t] = reinterpret_cast<const BlockQ8_0*>(act + t * act_stride);
    ex[t] = act + t * act_stride + nb * static_cast<int64_t>(sizeof(BlockQ8_0));
  }
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * kQ8x16Bytes;
    // Four blocks ahead (decode streams the groups from memory).
    for (int l = 0; l < 9; ++l)
      _mm_prefetch(reinterpret_cast<const char*>(blk + 4 * kQ8x16Bytes + 64 * l), _MM_HINT_T0);
    const __m512 dw = load_f16x16(blk);
    __m512i s0[NT], s1[NT];
    for (int t = 0; t < NT; ++t) {
      s0[t] = _mm512_set1_epi32(load_i32(ex[t] + 4 * b));
      s1[t] = _mm512_setzero_si512();
    }
#pragma GCC unroll 16
    for (int g = 0; g < 8; g += 2) {
      const __m512i w0 = load512(blk + kQ8x16Quants + 64 * g);
      const __m512i w1 = load512(blk + kQ8x16Quants + 64 * g + 64);
      for (int t = 0; t < NT; ++t) {
        s0[t] = _mm512_dpbusd_epi32(s0[t], w0, bcast32(a[t][b].qs + 4 * g));
        s1[t] = _mm512_dpbusd_epi32(s1[t], w1, bcast32(a[t][b].qs + 4 * g + 4));
      }
    }
    for (int t = 0; t < NT; ++t) {
      const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(_cvtsh_ss(a[t][b].d)));
      acc[t] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(_mm512_add_epi32(s0[t], s1[t])), acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(out + 16 * t, acc[t]);
}

// Q4_Kx16 · Q8_K: per sub-block s the unsigned nibbles times the activations (vpdpbusd), times
// the row's 6-bit scale (vpmulld); the mins times the activation sums of 32 (vpdpwssd on
// (min 2j, min 2j+1) pairs against the extra's int16 pairs).
// Q5_Kx16 (kBytes = kQ5Kx16Bytes) is the same with each level's fifth bit ORed in from its plane.
template <int NT, int64_t kBytes>
void gemm_q45_k(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, float* out) {
  constexpr bool kQ5 = kBytes == kQ5Kx16Bytes;
  constexpr int kLines = static_cast<int>((kBytes + 63) / 64 + 7) / 8;  // prefetch lines per sub-block
  constexpr bool kSplit = NT <= 4;  // two integer chains per token where registers allow
  const int64_t nb = n_cols / kQK_K;
  const BlockQ8_K* a[NT];
  const uint8_t* ex[NT];
  for (int t = 0; t < NT; ++t) {
    a[t] = reinterpret_cast<const BlockQ8_K*>(act + t * act_stride);
    ex[t] = act + t * act_stride + nb * static_cast<int64_t>(sizeof(BlockQ8_K));
  }
  const __m512i low = _mm512_set1_epi8(0x0F), fifth = _mm512_set1_epi8(0x10);
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * kBytes;
    __m512i tot[NT];
    for (int t = 0; t < NT; ++t) tot[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
      // The next super-block's 37 lines, 5 per sub-block: decode streams the groups from memory,
      // and without these requests it read Q4_K at two thirds of Q8_0's rate.
      for (int l = 0; l < kLines; ++l)
        _mm_prefetch(reinterpret_cast<const char*>(blk + kBytes + 64 * (kLines * s + l)), _MM_HINT_T0);
      const __m512i sc =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kQ4Kx16Scales + 16 * s)));
      const uint8_t* q = blk + kQ4Kx16Quants + 512 * (s / 2);
      const int8_t* qa[NT];
      for (int t = 0; t < NT; ++t) qa[t] = a[t][b].qs + 32 * s;
      __m512i is0[NT], is1[NT];
      for (int t = 0; t < NT; ++t) is0[t] = is1[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        const __m512i raw = load512(q + 64 * g);
        __m512i v = (s & 1) ? _mm512_and_si512(_mm512_srli_epi16(raw, 4), low) : _mm512_and_si512(raw, low);
        if constexpr (kQ5) {
          // Bit s of each byte moved to bit 4 (16-bit shifts: bits crossing bytes are masked off).
          const __m512i hb = load512(blk + kQ5Kx16High + 64 * g);
          const __m512i at4 = s <= 4 ? _mm512_slli_epi16(hb, 4 - s) : _mm512_srli_epi16(hb, s - 4);
          v = _mm512_or_si512(v, _mm512_and_si512(at4, fifth));
        }
        for (int t = 0; t < NT; ++t) {
          if (kSplit && (g & 1))
            is1[t] = _mm512_dpbusd_epi32(is1[t], v, bcast32(qa[t] + 4 * g));
          else
            is0[t] = _mm512_dpbusd_epi32(is0[t], v, bcast32(qa[t] + 4 * g));
        }
      }
      for (int t = 0; t < NT; ++t) {
        const __m512i is = kSplit ? _mm512_add_epi32(is0[t], is1[t]) : is0[t];
        tot[t] = _mm512_add_epi32(tot[t], _mm512_mullo_epi32(is, sc));
      }
    }
    __m512i msum[NT];
    for (int t = 0; t < NT; ++t) msum[t] = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j) {
      const __m512i mp =
          _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQ4Kx16Mins + 32 * j)));
      for (int t = 0; t < NT; ++t) msum[t] = _mm512_dpwssd_epi32(msum[t], mp, bcast32(ex[t] + 16 * b + 4 * j));
    }
    const __m512 dw = load_f16x16(blk), dm = load_f16x16(blk + kQ4Kx16Dmin);
    for (int t = 0; t < NT; ++t) {
      const __m512 da = _mm512_set1_ps(a[t][b].d);
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, da), _mm512_cvtepi32_ps(tot[t]), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(dm, da), _mm512_cvtepi32_ps(msum[t]), acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(out + 16 * t, acc[t]);
}

// Q6_Kx16 · Q8_K: levels rebuilt from the nibble and 2-bit planes (unsigned, 0..63); each
// 16-column sub-block's int32 sums start from the activation extra -32 * sum(a), so they end as
// the exact sum of (level - 32) * a, then times the row's int8 scale (vpmulld).
template <int NT>
void gemm_q6_k(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, float* out) {
  const int64_t nb = n_cols / kQK_K;
  const BlockQ8_K* a[NT];
  const uint8_t* neg32[NT];
  for (int t = 0; t < NT; ++t) {
    a[t] = reinterpret_cast<const BlockQ8_K*>(act + t * act_stride);
    neg32[t] = act + t * act_stride + nb * static_cast<int64_t>(sizeof(BlockQ8_K)) + nb * kQ8KExtraPairs;
  }
  const __m512i low = _mm512_set1_epi8(0x0F), top = _mm512_set1_epi8(0x30);
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * kQ6Kx16Bytes;
    __m512i tot[NT];
    for (int t = 0; t < NT; ++t) tot[t] = _mm512_setzero_si512();
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) {
      // The super-block after next, 53 lines, 4 per sub-block: the planes are read out of order,
      // which the hardware prefetchers follow poorly (decode ran at half the bandwidth without
      // this; two super-blocks ahead streamed ~10% faster than one in gemv/Q6_K/packed/cold).
      for (int l = 0; l < 4; ++l)
        _mm_prefetch(reinterpret_cast<const char*>(blk + 2 * kQ6Kx16Bytes + 64 * (4 * j + l)), _MM_HINT_T0);
      const __m512i sc =
          _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kQ6Kx16Scales + 16 * j)));
      __m512i is[NT];
      for (int t = 0; t < NT; ++t) is[t] = _mm512_set1_epi32(load_i32(neg32[t] + 4 * (16 * b + j)));
#pragma GCC unroll 16
      for (int i = 0; i < 4; ++i) {
        const int k = 4 * j + i;
        const __m512i nib = load512(blk + kQ6Kx16Nibbles + 64 * (k % 32));
        const __m512i bits = load512(blk + kQ6Kx16Bits + 64 * (k % 16));
        const __m512i lo = k < 32 ? _mm512_and_si512(nib, low) : _mm512_and_si512(_mm512_srli_epi16(nib, 4), low);
        // Bits 2f..2f+1 of each byte (f = k / 16) moved to bits 4..5.
        const int f = k / 16;
        const __m512i shifted = f == 0   ? _mm512_slli_epi16(bits, 4)
                                : f == 1 ? _mm512_slli_epi16(bits, 2)
                                : f == 2 ? bits
                                         : _mm512_srli_epi16(bits, 2);
        const __m512i q = _mm512_or_si512(lo, _mm512_and_si512(shifted, top));
        for (int t = 0; t < NT; ++t) is[t] = _mm512_dpbusd_epi32(is[t], q, bcast32(a[t][b].qs + 4 * k));
      }
      for (int t = 0; t < NT; ++t) tot[t] = _mm512_add_epi32(tot[t], _mm512_mullo_epi32(is[t], sc));
    }
    const __m512 dw = load_f16x16(blk);
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(a[t][b].d)), _mm512_cvtepi32_ps(tot[t]), acc[t]);
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(out + 16 * t, acc[t]);
}

// Q2_Kx16 · Q8_K: per 16-column sub-block the 2-bit levels times the activations (vpdpbusd),
// times the scale nibble (vpmulld); the min nibbles times Q8_K's bsums (vpdpwssd on the pairs).
template <int NT>
void gemm_q2_k(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, float* out) {
  constexpr int kLines = static_cast<int>((kQ2Kx16Bytes + 63) / 64 + 7) / 8;  // per pair of sub-blocks
  const int64_t nb = n_cols / kQK_K;
  const BlockQ8_K* a[NT];
  for (int t = 0; t < NT; ++t) a[t] = reinterpret_cast<const BlockQ8_K*>(act + t * act_stride);
  const __m512i three = _mm512_set1_epi8(3), nib = _mm512_set1_epi32(0x0F);
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * kQ2Kx16Bytes;
    __m512i tot[NT], msum[NT];
    for (int t = 0; t < NT; ++t) tot[t] = msum[t] = _mm512_setzero_si512();
#pragma GCC unroll 16
    for (int p = 0; p < 8; ++p) {
      for (int l = 0; l < kLines; ++l)
        _mm_prefetch(reinterpret_cast<const char*>(blk + kQ2Kx16Bytes + 64 * (kLines * p + l)), _MM_HINT_T0);
      // u16 lane 2r + k: the scale byte of sub-block 2p + k of row r.
      const __m512i scp =
          _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQ2Kx16Scales + 32 * p)));
      const __m512i mins = _mm512_srli_epi16(scp, 4);
      for (int t = 0; t < NT; ++t) msum[t] = _mm512_dpwssd_epi32(msum[t], mins, bcast32(a[t][b].bsums + 2 * p));
#pragma GCC unroll 16
      for (int k = 0; k < 2; ++k) {
        const int j = 2 * p + k, f = j / 4;
        const __m512i sc = _mm512_and_si512(k == 0 ? scp : _mm512_srli_epi32(scp, 16), nib);
        __m512i is[NT];
        for (int t = 0; t < NT; ++t) is[t] = _mm512_setzero_si512();
#pragma GCC unroll 16
        for (int i = 0; i < 4; ++i) {
          const int kk = 4 * j + i;
          const __m512i raw = load512(blk + kQ2Kx16Quants + 64 * (kk % 16));
          const __m512i v = _mm512_and_si512(f == 0 ? raw : _mm512_srli_epi16(raw, 2 * f), three);
          for (int t = 0; t < NT; ++t) is[t] = _mm512_dpbusd_epi32(is[t], v, bcast32(a[t][b].qs + 4 * kk));
        }
        for (int t = 0; t < NT; ++t) tot[t] = _mm512_add_epi32(tot[t], _mm512_mullo_epi32(is[t], sc));
      }
    }
    const __m512 dw = load_f16x16(blk), dm = load_f16x16(blk + kQ2Kx16Dmin);
    for (int t = 0; t < NT; ++t) {
      const __m512 da = _mm512_set1_ps(a[t][b].d);
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, da), _mm512_cvtepi32_ps(tot[t]), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(dm, da), _mm512_cvtepi32_ps(msum[t]), acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(out + 16 * t, acc[t]);
}

// Q3_Kx16 · Q8_K: levels low | high << 2 (unsigned, 0..7); each 16-column sub-block's sums start
// from -4 x its activation sum (bsums), so they end as the exact sum of level x a, then times
// the row's signed scale.
template <int NT>
void gemm_q3_k(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, float* out) {
  constexpr int kLines = static_cast<int>((kQ3Kx16Bytes + 63) / 64 + 15) / 16;  // per sub-block
  const int64_t nb = n_cols / kQK_K;
  const BlockQ8_K* a[NT];
  for (int t = 0; t < NT; ++t) a[t] = reinterpret_cast<const BlockQ8_K*>(act + t * act_stride);
  const __m512i three = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * kQ3Kx16Bytes;
    __m512i tot[NT];
    for (int t = 0; t < NT; ++t) tot[t] = _mm512_setzero_si512();
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < kLines; ++l)
        _mm_prefetch(reinterpret_cast<const char*>(blk + kQ3Kx16Bytes + 64 * (kLines * j + l)), _MM_HINT_T0);
      const __m512i sc =
          _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kQ3Kx16Scales + 16 * j)));
      __m512i is[NT];
      for (int t = 0; t < NT; ++t) is[t] = _mm512_set1_epi32(-4 * a[t][b].bsums[j]);
      const int f = j / 4;
#pragma GCC unroll 16
      for (int i = 0; i < 4; ++i) {
        const int kk = 4 * j + i, fh = kk / 8;
        const __m512i raw = load512(blk + kQ3Kx16Quants + 64 * (kk % 16));
        const __m512i low = _mm512_and_si512(f == 0 ? raw : _mm512_srli_epi16(raw, 2 * f), three);
        // Bit fh of each byte moved to bit 2 (16-bit shifts: bits crossing bytes are masked off).
        const __m512i hb = load512(blk + kQ3Kx16High + 64 * (kk % 8));
        const __m512i at2 = fh >= 2 ? _mm512_srli_epi16(hb, fh - 2) : _mm512_slli_epi16(hb, 2 - fh);
        const __m512i v = _mm512_or_si512(low, _mm512_and_si512(at2, four));
        for (int t = 0; t < NT; ++t) is[t] = _mm512_dpbusd_epi32(is[t], v, bcast32(a[t][b].qs + 4 * kk));
      }
      for (int t = 0; t < NT; ++t) tot[t] = _mm512_add_epi32(tot[t], _mm512_mullo_epi32(is[t], sc));
    }
    const __m512 dw = load_f16x16(blk);
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(a[t][b].d)), _mm512_cvtepi32_ps(tot[t]), acc[t]);
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(out + 16 * t, acc[t]);
}

// The kernels as by_count's K.
struct Q8_0Kernel {
  template <int NT>
  static void run(int64_t n, const uint8_t* g, const uint8_t* a, int64_t s, float* o) {
    gemm_q8_0<NT>(n, g, a, s, o);
  }
};
struct Q2_KKernel {
  template <int NT>
  static void run(int64_t n, const uint8_t* g, const uint8_t* a, int64_t s, float* o) {
    gemm_q2_k<NT>(n, g, a, s, o);
  }
};
struct Q3_KKernel {
  template <int NT>
  static void run(int64_t n, const uint8_t* g, const uint8_t* a, int64_t s, float* o) {
    gemm_q3_k<NT>(n, g, a, s, o);
  }
};
template <int64_t kBytes>
struct Q45_KKernel {
  template <int NT>
  static void run(int64_t n, const uint8_t* g, const uint8_t* a, int64_t s, float* o) {
    gemm_q45_k<NT, kBytes>(n, g, a, s, o);
  }
};
struct Q6_KKernel {
  template <int NT>
  static void run(int64_t n, const uint8_t* g, const uint8_t* a, int64_t s, float* o) {
    gemm_q6_k<NT>(n, g, a, s, o);
  }
};

}  // namespace

PackedGemmFn packed_gemm_avx512_fn(GgmlType t) {
  if (t == GgmlType::Q8_0) return by_count<Q8_0Kernel>;
  if (t == GgmlType::Q2_K) return by_count<Q2_KKernel>;
  if (t == GgmlType::Q3_K) return by_count<Q3_KKernel>;
  if (t == GgmlType::Q4_K) return by_count<Q45_KKernel<kQ4Kx16Bytes>>;
  if (t == GgmlType::Q5_K) return by_count<Q45_KKernel<kQ5Kx16Bytes>>;
  if (t == GgmlType::Q6_K) return by_count<Q6_KKernel>;
  if (PackedGemmFn f = packed_gemm_iq_avx512_fn(t)) return f;
  if (PackedGemmFn f = packed_gemm_iqk_avx512_fn(t)) return f;
  return packed_gemm_nibble_avx512_fn(t);
}

}  // namespace mla::quant
