// AVX2 GEMM over the packed groups of the grid-and-sign i-quants (layout in packed_iq.h), for
// CPUs without AVX-512 VNNI; rows are taken 8 at a time (packed_avx2.h). 8-byte points (IQ2):
// per group of 8 columns, two ymm of 4 rows' points each; 4-byte points (IQ3): per half of a
// group, one dword gather fetches the 8 rows' points. The sign bits, expanded to bytes,
// negate the points, and +64 makes them unsigned for vpmaddubsw: at most 64 + 62, so a pair sum
// is at most 2 x 126 x 128 and cannot saturate. Each scale group's int32 sums start from -64 x the
// activation sum of its columns (Q8_K's bsums), so they end exact; then times the row's integer
// scale. The float steps per (row, token) are the scalar twin's, in its order, so results are
// bit-identical to packed_iq.cpp whatever the number of tokens in the call.
#include <immintrin.h>

#include <cstring>

#include "quant/kernels.h"
#include "quant/packed_avx2.h"
#include "quant/packed_iq.h"
#include "util/ggml_blocks.h"

namespace mla::quant {
namespace {

using namespace avx2p;

// Grid points with their signs applied (sign bits m, one per byte), + 64.
inline __m256i signed_unsigned(__m256i w, uint32_t m) {
  const __m256i s = _mm256_or_si256(expand_mask32(m), _mm256_set1_epi8(1));  // -1 or +1 per byte
  return _mm256_add_epi8(_mm256_sign_epi8(w, s), _mm256_set1_epi8(64));
}

// IQ1's -1/0/+1 points as 8 x (point + 1), plus 2 in the rows whose shift is +1/8 (bit q of up4:
// qword q), = 8 x point + shift + 9: at most 18, so a vpmaddubsw pair sum stays far from int16's limit.
inline __m256i shifted_unsigned(__m256i w, uint32_t up4) {
  const __m256i lane_bit = _mm256_setr_epi64x(1, 2, 4, 8);
  const __m256i up = _mm256_cmpeq_epi64(_mm256_and_si256(_mm256_set1_epi64x(up4), lane_bit), lane_bit);
  const __m256i base = _mm256_slli_epi16(_mm256_add_epi8(w, _mm256_set1_epi8(1)), 3);  // bytes <= 16
  return _mm256_add_epi8(base, _mm256_and_si256(up, _mm256_set1_epi8(2)));
}

// Index i of a run of kIdxBytes-byte little-endian indices.
template <int kIdxBytes>
inline int idx_at(const uint8_t* p, int i) {
  if constexpr (kIdxBytes == 1) {
    return p[i];
  } else {
    uint16_t v;
    std::memcpy(&v, p + 2 * i, 2);
    return v;
  }
}

// 8 indices of kIdxBytes each, zero-extended to int32.
template <int kIdxBytes>
inline __m256i idx8(const uint8_t* p) {
  if constexpr (kIdxBytes == 1) return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// The 8-byte-point types' scale group s of one super-block, half h (rows 8h..8h+7): rows 8h..8h+3
// (e0) and 8h+4..8h+7 (e1), dword lanes 2q and 2q+1 holding columns 0-3 and 4-7 of row q, against
// the group's 8 activations broadcast as a qword; the level sums added to is[t] in row order.
template <GgmlType kType, int NT>
[[gnu::always_inline]] inline void scale_sums_8(const uint8_t* blk, int s, int h, const BlockQ8_K* const* a, int64_t b,
                                                __m256i* is) {
  constexpr IqPackedSpec sp = iq_packed_spec(kType);
  constexpr int kGroupsPerScale = 32 / sp.n_scales;
  const auto* grid = static_cast<const int64_t*>(sp.grid);
  __m256i e0[NT], e1[NT];
  for (int t = 0; t < NT; ++t) e0[t] = e1[t] = _mm256_setzero_si256();
  for (int gg = 0; gg < kGroupsPerScale; ++gg) {
    const int g = s * kGroupsPerScale + gg;
    const uint8_t* p = blk + sp.idx_offset() + (g * 16 + 8 * h) * sp.idx_bytes;
    // Four 8-byte points by scalar loads: as fast as vpgatherdq on the Xeon measured
    // (gemm/IQ2_*/packed_avx2, within 5%), and gathers are slower on AMD Zen cores.
    const __m256i w0 = _mm256_setr_epi64x(grid[idx_at<sp.idx_bytes>(p, 0)], grid[idx_at<sp.idx_bytes>(p, 1)],
                                          grid[idx_at<sp.idx_bytes>(p, 2)], grid[idx_at<sp.idx_bytes>(p, 3)]);
    const __m256i w1 = _mm256_setr_epi64x(grid[idx_at<sp.idx_bytes>(p, 4)], grid[idx_at<sp.idx_bytes>(p, 5)],
                                          grid[idx_at<sp.idx_bytes>(p, 6)], grid[idx_at<sp.idx_bytes>(p, 7)]);
    __m256i u0, u1;
    if constexpr (sp.shift) {
      const uint32_t up = blk[sp.mask_offset() + 2 * g + h];  // bit q: row 8h + q shifted up
      u0 = shifted_unsigned(w0, up & 0xF);
      u1 = shifted_unsigned(w1, up >> 4);
    } else {
      const uint8_t* m = blk + sp.mask_offset() + 16 * g + 8 * h;
      u0 = signed_unsigned(w0, static_cast<uint32_t>(load_i32(m)));
      u1 = signed_unsigned(w1, static_cast<uint32_t>(load_i32(m + 4)));
    }
    for (int t = 0; t < NT; ++t) {
      int64_t a8;
      std::memcpy(&a8, a[t][b].qs + 8 * g, 8);
      const __m256i av = _mm256_set1_epi64x(a8);
      e0[t] = _mm256_add_epi32(e0[t], sum_pairs(_mm256_maddubs_epi16(u0, av)));
      e1[t] = _mm256_add_epi32(e1[t], sum_pairs(_mm256_maddubs_epi16(u1, av)));
    }
  }
  // hadd gives rows (0 1 4 5 | 2 3 6 7); the qword permute puts them in order.
  for (int t = 0; t < NT; ++t)
    is[t] = _mm256_add_epi32(is[t], _mm256_permute4x64_epi64(_mm256_hadd_epi32(e0[t], e1[t]), 0xD8));
}

// The 4-byte-point types' scale group s, half h: 8 rows x 4 bytes gathered per half group, each
// against its 4 activations broadcast; added to is[t].
template <GgmlType kType, int NT>
[[gnu::always_inline]] inline void scale_sums_4(const uint8_t* blk, int s, int h, const BlockQ8_K* const* a, int64_t b,
                                                __m256i* is) {
  constexpr IqPackedSpec sp = iq_packed_spec(kType);
  constexpr int kGroupsPerScale = 32 / sp.n_scales;
  const auto* grid = static_cast<const int*>(sp.grid);
  for (int gg = 0; gg < kGroupsPerScale; ++gg) {
    const int g = s * kGroupsPerScale + gg;
    for (int hh = 0; hh < 2; ++hh) {
      const uint8_t* p = blk + sp.idx_offset() + ((2 * g + hh) * 16 + 8 * h) * sp.idx_bytes;
      // One vpgatherdd: 17.8 against 14.3 GMAC/s for scalar loads at 1 token
      // (gemm/IQ3_XXS/packed_avx2/t1 on the Xeon measured).
      const __m256i w = _mm256_i32gather_epi32(grid, idx8<sp.idx_bytes>(p), 4);
      const __m256i u =
          signed_unsigned(w, static_cast<uint32_t>(load_i32(blk + sp.mask_offset() + 8 * (2 * g + hh) + 4 * h)));
      for (int t = 0; t < NT; ++t)
        is[t] = _mm256_add_epi32(is[t], sum_pairs(_mm256_maddubs_epi16(u, bcast4(a[t][b].qs + 8 * g + 4 * hh))));
    }
  }
}

template <GgmlType kType, int NT>
void gemm_iq(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, float* out) {
  constexpr IqPackedSpec sp = iq_packed_spec(kType);
  constexpr int64_t kBytes = sp.bytes();
  constexpr int kLines = static_cast<int>((kBytes + 63) / 64 + sp.n_scales - 1) / sp.n_scales;
  const int64_t nb = n_cols / kQK_K;
  const BlockQ8_K* a[NT];
  for (int t = 0; t < NT; ++t) a[t] = reinterpret_cast<const BlockQ8_K*>(act + t * act_stride);
  const __m256 inv_den = _mm256_set1_ps(sp.inv_den);
  __m256 acc[2][NT];
  zero_halves(acc);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * kBytes;
    for (int h = 0; h < 2; ++h) {
      __m256i tot[NT];
      for (int t = 0; t < NT; ++t) tot[t] = _mm256_setzero_si256();
      for (int s = 0; s < sp.n_scales; ++s) {
        if (h == 0)
          for (int l = 0; l < kLines; ++l)
            _mm_prefetch(reinterpret_cast<const char*>(blk + kBytes + 64 * (kLines * s + l)), _MM_HINT_T0);
        __m256i is[NT];
        for (int t = 0; t < NT; ++t) {
          const int16_t* bs = a[t][b].bsums;
          const int32_t sum = sp.n_scales == 16 ? bs[s] : bs[2 * s] + bs[2 * s + 1];
          is[t] = _mm256_set1_epi32(-sp.offset * sum);
        }
        if constexpr (sp.point_bytes == 8)
          scale_sums_8<kType, NT>(blk, s, h, a, b, is);
        else
          scale_sums_4<kType, NT>(blk, s, h, a, b, is);
        const __m256i ls = _mm256_cvtepu8_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + sp.ls_offset() + 16 * s + 8 * h)));
        for (int t = 0; t < NT; ++t) tot[t] = _mm256_add_epi32(tot[t], _mm256_mullo_epi32(is[t], ls));
      }
      const __m256 dw = _mm256_mul_ps(f16x8(blk + 16 * h), inv_den);
      add_scaled_sums<NT>(dw, a, b, tot, acc[h]);
    }
  }
  store_halves(acc, out);
}

// The kernel of kType as by_count's K.
template <GgmlType kType>
struct IqKernel {
  template <int NT>
  static void run(int64_t n, const uint8_t* g, const uint8_t* a, int64_t s, float* o) {
    gemm_iq<kType, NT>(n, g, a, s, o);
  }
};

}  // namespace

PackedGemmFn packed_gemm_iq_avx2_fn(GgmlType t) {
  switch (t) {
    case GgmlType::IQ2_XXS:
      return by_count<IqKernel<GgmlType::IQ2_XXS>>;
    case GgmlType::IQ2_XS:
      return by_count<IqKernel<GgmlType::IQ2_XS>>;
    case GgmlType::IQ2_S:
      return by_count<IqKernel<GgmlType::IQ2_S>>;
    case GgmlType::IQ3_XXS:
      return by_count<IqKernel<GgmlType::IQ3_XXS>>;
    case GgmlType::IQ3_S:
      return by_count<IqKernel<GgmlType::IQ3_S>>;
    case GgmlType::IQ1_S:
      return by_count<IqKernel<GgmlType::IQ1_S>>;
    case GgmlType::IQ1_M:
      return by_count<IqKernel<GgmlType::IQ1_M>>;
    default:
      return nullptr;
  }
}

}  // namespace mla::quant
