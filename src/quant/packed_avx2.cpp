// AVX2 GEMM over packed 16-row groups (layouts in packed.h), for CPUs without AVX-512 VNNI. Each
// 64-byte entry is read as two halves of 8 rows (packed_avx2.h); per half, the byte products of
// 4 consecutive columns land in a row's 32-bit lane through vpmaddubsw (int16 pairs) and vpmaddwd
// (the pairs summed, or times the row's integer scale). Each weight load serves NT tokens.
//
// Per (row, token) the float operations are those of packed_ref.cpp's twin, in the same order
// (one accumulator, blocks in order), so results are bit-identical to it and independent of NT.
// Integer sums are exact: each kernel says why no int16 pair sum can saturate.
#include "quant/packed_avx2.h"

#include <immintrin.h>

#include "quant/kernels.h"
#include "quant/packed_iqk.h"
#include "util/ggml_blocks.h"

namespace mla::quant {
namespace {

using namespace avx2p;

// Q8_0x16 · Q8_0: the stored q + 128 flipped back to q, then |q| x (a with q's sign) — the sign
// moved onto the activation, which is never -128 (quantize_row's Q8_0 lies in [-127, 127]), so
// a pair sum is at most 2 x 128 x 127. The int32 sum is then the exact sum of q * a, which the
// twin reaches as -128 * sum(a) + sum((q + 128) * a).
// A super-block's float step for rows 8h..8h+7 of the types with mins (Q2_K, Q4_K, Q5_K), in the
// twins' order: acc += (d x a.d) x tot, then acc -= (dmin x a.d) x msum.
template <int NT>
inline void add_scaled_min_sums(const uint8_t* blk, int64_t dmin_offset, int h, const BlockQ8_K* const* a, int64_t b,
                                const __m256i* tot, const __m256i* msum, __m256* acc) {
  const __m256 dw = f16x8(blk + 16 * h), dm = f16x8(blk + dmin_offset + 16 * h);
  add_scaled_sums<NT>(dw, a, b, tot, acc);
  for (int t = 0; t < NT; ++t)
    acc[t] = _mm256_fnmadd_ps(_mm256_mul_ps(dm, _mm256_set1_ps(a[t][b].d)), _mm256_cvtepi32_ps(msum[t]), acc[t]);
}

template <int NT>
void gemm_q8_0(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, float* out) {
  const int64_t nb = n_cols / kQK;
  const BlockQ8_0* a[NT];
  for (int t = 0; t < NT; ++t) a[t] = reinterpret_cast<const BlockQ8_0*>(act + t * act_stride);
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256 acc[2][NT];
  zero_halves(acc);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * kQ8x16Bytes;
    for (int l = 0; l < 9; ++l)
      _mm_prefetch(reinterpret_cast<const char*>(blk + 4 * kQ8x16Bytes + 64 * l), _MM_HINT_T0);
    for (int h = 0; h < 2; ++h) {
      __m256i s[NT];
      for (int t = 0; t < NT; ++t) s[t] = _mm256_setzero_si256();
      for (int g = 0; g < 8; ++g) {
        const __m256i q = _mm256_xor_si256(half(blk + kQ8x16Quants + 64 * g, h), flip);
        const __m256i aq = _mm256_sign_epi8(q, q);  // |q|: 0x80 (128 unsigned) for q = -128
        for (int t = 0; t < NT; ++t) {
          const __m256i p = _mm256_maddubs_epi16(aq, _mm256_sign_epi8(bcast4(a[t][b].qs + 4 * g), q));
          s[t] = _mm256_add_epi32(s[t], sum_pairs(p));
        }
      }
      const __m256 dw = f16x8(blk + 16 * h);
      for (int t = 0; t < NT; ++t) {
        const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(_cvtsh_ss(a[t][b].d)));
        acc[h][t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s[t]), acc[h][t]);
      }
    }
  }
  store_halves(acc, out);
}

// Q4_Kx16 · Q8_K: levels 0..15 (Q5_K: 0..31). vpmaddubsw pair sums are at most 2 x 15 x 128, so
// a sub-block's 8 entries add up in int16 (Q5_K: 2 x 31 x 128 per pair, 4 entries at a time)
// before vpmaddwd multiplies them by the row's 6-bit scale. The mins times the activation sums
// of 32 (vpmaddwd on (min 2j, min 2j+1) pairs against the extra's int16 pairs).
template <int NT, int64_t kBytes>
void gemm_q45_k(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, float* out) {
  constexpr bool kQ5 = kBytes == kQ5Kx16Bytes;
  constexpr int kLines = static_cast<int>((kBytes + 63) / 64 + 7) / 8;  // prefetch lines per sub-block
  constexpr int kRun = kQ5 ? 4 : 8;                                     // entries summed in int16
  const int64_t nb = n_cols / kQK_K;
  const BlockQ8_K* a[NT];
  const uint8_t* ex[NT];
  for (int t = 0; t < NT; ++t) {
    a[t] = reinterpret_cast<const BlockQ8_K*>(act + t * act_stride);
    ex[t] = act + t * act_stride + nb * static_cast<int64_t>(sizeof(BlockQ8_K));
  }
  const __m256i low = _mm256_set1_epi8(0x0F), fifth = _mm256_set1_epi8(0x10);
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
        const __m256i sc = u8_pairs(blk + kQ4Kx16Scales + 16 * s + 8 * h);
        const uint8_t* q = blk + kQ4Kx16Quants + 512 * (s / 2);
        __m256i p[NT];
        for (int t = 0; t < NT; ++t) p[t] = _mm256_setzero_si256();
        for (int g = 0; g < 8; ++g) {
          const __m256i raw = half(q + 64 * g, h);
          __m256i v = (s & 1) ? _mm256_and_si256(_mm256_srli_epi16(raw, 4), low) : _mm256_and_si256(raw, low);
          if constexpr (kQ5) {
            // Bit s of each byte moved to bit 4 (16-bit shifts: bits crossing bytes are masked off).
            const __m256i hb = half(blk + kQ5Kx16High + 64 * g, h);
            const __m256i at4 = s <= 4 ? _mm256_slli_epi16(hb, 4 - s) : _mm256_srli_epi16(hb, s - 4);
            v = _mm256_or_si256(v, _mm256_and_si256(at4, fifth));
          }
          for (int t = 0; t < NT; ++t)
            p[t] = _mm256_add_epi16(p[t], _mm256_maddubs_epi16(v, bcast4(a[t][b].qs + 32 * s + 4 * g)));
          if ((g + 1) % kRun == 0)
            for (int t = 0; t < NT; ++t) {
              tot[t] = _mm256_add_epi32(tot[t], _mm256_madd_epi16(p[t], sc));
              p[t] = _mm256_setzero_si256();
            }
        }
      }
      __m256i msum[NT];
      for (int t = 0; t < NT; ++t) msum[t] = _mm256_setzero_si256();
      for (int j = 0; j < 4; ++j) {
        const __m256i mp = _mm256_cvtepu8_epi16(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kQ4Kx16Mins + 32 * j + 16 * h)));
        for (int t = 0; t < NT; ++t)
          msum[t] = _mm256_add_epi32(msum[t], _mm256_madd_epi16(mp, bcast4(ex[t] + 16 * b + 4 * j)));
      }
      add_scaled_min_sums<NT>(blk, kQ4Kx16Dmin, h, a, b, tot, msum, acc[h]);
    }
  }
  store_halves(acc, out);
}

// sum over the 16 sub-blocks j of scale_j x bsum_j for rows 8h..8h+7, from the layout's int8
// scales [16 sub-blocks][16 rows]: vpmaddwd on (scale 2p, scale 2p+1) against Q8_K's bsums pair.
// Q3_K and Q6_K subtract it (times 4 or 32) for their level offsets. Exact: |scale| <= 128 and
// |bsum| <= 16 x 128.
template <int NT>
inline void scale_bsums(const uint8_t* scales, const BlockQ8_K* const* a, int64_t b, int h, __m256i* out) {
  for (int t = 0; t < NT; ++t) out[t] = _mm256_setzero_si256();
  for (int p = 0; p < 8; ++p) {
    const __m256i sp = i8_interleave(scales + 32 * p, scales + 32 * p + 16, h);
    for (int t = 0; t < NT; ++t)
      out[t] = _mm256_add_epi32(out[t], _mm256_madd_epi16(sp, bcast4(a[t][b].bsums + 2 * p)));
  }
}

// Q6_Kx16 · Q8_K: levels rebuilt from the nibble and 2-bit planes (unsigned, 0..63). Pair sums
// are at most 2 x 63 x 128, so two entries add up in int16 before vpmaddwd by the row's int8
// scale; the level offset comes off at the end as 32 x sum(scale x bsum).
template <int NT>
void gemm_q6_k(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, float* out) {
  const int64_t nb = n_cols / kQK_K;
  const BlockQ8_K* a[NT];
  for (int t = 0; t < NT; ++t) a[t] = reinterpret_cast<const BlockQ8_K*>(act + t * act_stride);
  const __m256i low = _mm256_set1_epi8(0x0F), top = _mm256_set1_epi8(0x30);
  __m256 acc[2][NT];
  zero_halves(acc);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * kQ6Kx16Bytes;
    for (int h = 0; h < 2; ++h) {
      __m256i tot[NT];
      for (int t = 0; t < NT; ++t) tot[t] = _mm256_setzero_si256();
      for (int j = 0; j < 16; ++j) {
        // The super-block after next (as the AVX-512 kernel: the planes are read out of order).
        if (h == 0)
          for (int l = 0; l < 4; ++l)
            _mm_prefetch(reinterpret_cast<const char*>(blk + 2 * kQ6Kx16Bytes + 64 * (4 * j + l)), _MM_HINT_T0);
        const __m256i sc = i8_pairs(blk + kQ6Kx16Scales + 16 * j + 8 * h);
        __m256i p[NT];
        for (int t = 0; t < NT; ++t) p[t] = _mm256_setzero_si256();
        for (int i = 0; i < 4; ++i) {
          const int k = 4 * j + i;
          const __m256i nib = half(blk + kQ6Kx16Nibbles + 64 * (k % 32), h);
          const __m256i bits = half(blk + kQ6Kx16Bits + 64 * (k % 16), h);
          const __m256i lo = k < 32 ? _mm256_and_si256(nib, low) : _mm256_and_si256(_mm256_srli_epi16(nib, 4), low);
          const int f = k / 16;  // bits 2f..2f+1 of each byte moved to bits 4..5
          const __m256i shifted = f == 0   ? _mm256_slli_epi16(bits, 4)
                                  : f == 1 ? _mm256_slli_epi16(bits, 2)
                                  : f == 2 ? bits
                                           : _mm256_srli_epi16(bits, 2);
          const __m256i q = _mm256_or_si256(lo, _mm256_and_si256(shifted, top));
          for (int t = 0; t < NT; ++t)
            p[t] = _mm256_add_epi16(p[t], _mm256_maddubs_epi16(q, bcast4(a[t][b].qs + 4 * k)));
          if (i & 1)
            for (int t = 0; t < NT; ++t) {
              tot[t] = _mm256_add_epi32(tot[t], _mm256_madd_epi16(p[t], sc));
              p[t] = _mm256_setzero_si256();
            }
        }
      }
      __m256i corr[NT];
      scale_bsums<NT>(blk + kQ6Kx16Scales, a, b, h, corr);
      const __m256 dw = f16x8(blk + 16 * h);
      for (int t = 0; t < NT; ++t) {
        const __m256i is = _mm256_sub_epi32(tot[t], _mm256_slli_epi32(corr[t], 5));
        acc[h][t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(a[t][b].d)), _mm256_cvtepi32_ps(is), acc[h][t]);
      }
    }
  }
  store_halves(acc, out);
}

// Q2_Kx16 · Q8_K: levels 0..3, pair sums at most 2 x 3 x 128, a sub-block's 4 entries summed in
// int16, then vpmaddwd by the scale nibble; the min nibbles times Q8_K's bsums (vpmaddwd pairs).
template <int NT>
void gemm_q2_k(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, float* out) {
  constexpr int kLines = static_cast<int>((kQ2Kx16Bytes + 63) / 64 + 7) / 8;  // per pair of sub-blocks
  const int64_t nb = n_cols / kQK_K;
  const BlockQ8_K* a[NT];
  for (int t = 0; t < NT; ++t) a[t] = reinterpret_cast<const BlockQ8_K*>(act + t * act_stride);
  const __m256i three = _mm256_set1_epi8(3), nib = _mm256_set1_epi16(0x0F);
  __m256 acc[2][NT];
  zero_halves(acc);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * kQ2Kx16Bytes;
    for (int h = 0; h < 2; ++h) {
      __m256i tot[NT], msum[NT];
      for (int t = 0; t < NT; ++t) tot[t] = msum[t] = _mm256_setzero_si256();
      for (int p = 0; p < 8; ++p) {
        if (h == 0)
          for (int l = 0; l < kLines; ++l)
            _mm_prefetch(reinterpret_cast<const char*>(blk + kQ2Kx16Bytes + 64 * (kLines * p + l)), _MM_HINT_T0);
        // u16 lane 2r + k: the scale byte of sub-block 2p + k of row 8h + r.
        const __m256i scp = _mm256_cvtepu8_epi16(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kQ2Kx16Scales + 32 * p + 16 * h)));
        const __m256i mins = _mm256_srli_epi16(scp, 4);
        for (int t = 0; t < NT; ++t)
          msum[t] = _mm256_add_epi32(msum[t], _mm256_madd_epi16(mins, bcast4(a[t][b].bsums + 2 * p)));
        const __m256i scl = _mm256_and_si256(scp, nib);
        for (int k = 0; k < 2; ++k) {
          const int j = 2 * p + k, f = j / 4;
          // (scale, scale) of sub-block j in both int16 halves of each row's lane.
          const __m256i sc = k == 0 ? _mm256_shufflehi_epi16(_mm256_shufflelo_epi16(scl, 0xA0), 0xA0)
                                    : _mm256_shufflehi_epi16(_mm256_shufflelo_epi16(scl, 0xF5), 0xF5);
          __m256i is[NT];
          for (int t = 0; t < NT; ++t) is[t] = _mm256_setzero_si256();
          for (int i = 0; i < 4; ++i) {
            const int kk = 4 * j + i;
            const __m256i raw = half(blk + kQ2Kx16Quants + 64 * (kk % 16), h);
            const __m256i v = _mm256_and_si256(f == 0 ? raw : _mm256_srli_epi16(raw, 2 * f), three);
            for (int t = 0; t < NT; ++t)
              is[t] = _mm256_add_epi16(is[t], _mm256_maddubs_epi16(v, bcast4(a[t][b].qs + 4 * kk)));
          }
          for (int t = 0; t < NT; ++t) tot[t] = _mm256_add_epi32(tot[t], _mm256_madd_epi16(is[t], sc));
        }
      }
      add_scaled_min_sums<NT>(blk, kQ2Kx16Dmin, h, a, b, tot, msum, acc[h]);
    }
  }
  store_halves(acc, out);
}

// Q3_Kx16 · Q8_K: levels low | high << 2 (unsigned, 0..7, the twin's level + 4); pair sums at
// most 2 x 7 x 128, a sub-block's 4 entries summed in int16, then vpmaddwd by the row's signed
// scale; the offset comes off at the end as 4 x sum(scale x bsum).
template <int NT>
void gemm_q3_k(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, float* out) {
  constexpr int kLines = static_cast<int>((kQ3Kx16Bytes + 63) / 64 + 15) / 16;  // per sub-block
  const int64_t nb = n_cols / kQK_K;
  const BlockQ8_K* a[NT];
  for (int t = 0; t < NT; ++t) a[t] = reinterpret_cast<const BlockQ8_K*>(act + t * act_stride);
  const __m256i three = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
  __m256 acc[2][NT];
  zero_halves(acc);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * kQ3Kx16Bytes;
    for (int h = 0; h < 2; ++h) {
      __m256i tot[NT];
      for (int t = 0; t < NT; ++t) tot[t] = _mm256_setzero_si256();
      for (int j = 0; j < 16; ++j) {
        if (h == 0)
          for (int l = 0; l < kLines; ++l)
            _mm_prefetch(reinterpret_cast<const char*>(blk + kQ3Kx16Bytes + 64 * (kLines * j + l)), _MM_HINT_T0);
        const __m256i sc = i8_pairs(blk + kQ3Kx16Scales + 16 * j + 8 * h);
        const int f = j / 4;
        __m256i is[NT];
        for (int t = 0; t < NT; ++t) is[t] = _mm256_setzero_si256();
        for (int i = 0; i < 4; ++i) {
          const int kk = 4 * j + i, fh = kk / 8;
          const __m256i raw = half(blk + kQ3Kx16Quants + 64 * (kk % 16), h);
          const __m256i lo = _mm256_and_si256(f == 0 ? raw : _mm256_srli_epi16(raw, 2 * f), three);
          // Bit fh of each byte moved to bit 2 (16-bit shifts: bits crossing bytes are masked off).
          const __m256i hb = half(blk + kQ3Kx16High + 64 * (kk % 8), h);
          const __m256i at2 = fh >= 2 ? _mm256_srli_epi16(hb, fh - 2) : _mm256_slli_epi16(hb, 2 - fh);
          const __m256i v = _mm256_or_si256(lo, _mm256_and_si256(at2, four));
          for (int t = 0; t < NT; ++t)
            is[t] = _mm256_add_epi16(is[t], _mm256_maddubs_epi16(v, bcast4(a[t][b].qs + 4 * kk)));
        }
        for (int t = 0; t < NT; ++t) tot[t] = _mm256_add_epi32(tot[t], _mm256_madd_epi16(is[t], sc));
      }
      __m256i corr[NT];
      scale_bsums<NT>(blk + kQ3Kx16Scales, a, b, h, corr);
      const __m256 dw = f16x8(blk + 16 * h);
      for (int t = 0; t < NT; ++t) {
        const __m256i is = _mm256_sub_epi32(tot[t], _mm256_slli_epi32(corr[t], 2));
        acc[h][t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(a[t][b].d)), _mm256_cvtepi32_ps(is), acc[h][t]);
      }
    }
  }
  store_halves(acc, out);
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
// Run in calls of at most 4 tokens (InFours): 57 against 42 GMAC/s at 8 tokens in
// gemm/Q6_K/packed_avx2/t8; the other kernels lose 5-25% so (x86-64-v3 build, Xeon host).
struct Q6_KKernel {
  template <int NT>
  static void run(int64_t n, const uint8_t* g, const uint8_t* a, int64_t s, float* o) {
    gemm_q6_k<NT>(n, g, a, s, o);
  }
};

}  // namespace

PackedGemmFn packed_gemm_avx2_fn(GgmlType t) {
  if (t == GgmlType::Q8_0) return by_count<Q8_0Kernel>;
  if (t == GgmlType::Q2_K) return by_count<Q2_KKernel>;
  if (t == GgmlType::Q3_K) return by_count<Q3_KKernel>;
  if (t == GgmlType::Q4_K) return by_count<Q45_KKernel<kQ4Kx16Bytes>>;
  if (t == GgmlType::Q5_K) return by_count<Q45_KKernel<kQ5Kx16Bytes>>;
  if (t == GgmlType::Q6_K) return by_count<InFours<Q6_KKernel>>;
  if (PackedGemmFn f = packed_gemm_iq_avx2_fn(t)) return f;
  if (PackedGemmFn f = packed_gemm_iqk_avx2_fn(t)) return f;
  return packed_gemm_nibble_avx2_fn(t);
}

}  // namespace mla::quant
