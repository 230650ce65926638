// AVX-512 VNNI GEMM over the packed groups of the grid-and-sign i-quants (layout in packed_iq.h).
// 8-byte points (IQ2): per group of 8 columns, one qword gather per 8 rows fetches their points
// whole; 4-byte points (IQ3): per half of a group, one dword gather fetches the 16 rows' points
// (the operand of one vpdpbusd: lane r = row r). The signs, stored as the gathers' 64-bit masks,
// negate the bytes, and +64 makes them unsigned for vpdpbusd. Each scale group's int32 sums start
// from -64 x the activation sum of its columns (Q8_K's bsums), so they end exact; then times the
// row's integer scale. IQ1 has no signs: its -1/0/+1 points become 8 * (point + 1) and the group's
// shift (stored as one bit per row) adds 2 where it is +1/8, giving 8 * point + shift + 9, so its
// sums start from -9 x the activation sum instead. The float steps per (row, token) are the scalar twin's, in its
// order, so results are bit-identical to packed_iq.cpp whatever the number of tokens in the call.
#include <immintrin.h>
// GCC 12 flags the deliberately undefined pass-through operand of its own AVX-512 intrinsics.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <cstring>

#include "quant/kernels.h"
#include "quant/packed_avx512.h"
#include "quant/packed_iq.h"
#include "util/ggml_blocks.h"

namespace mla::quant {
namespace {

// Bit q of `bits` to all 8 bits of byte q: the byte mask of the rows whose bit is set, in the
// layout of an 8-row qword gather (byte 8q + j = column j of row q).
inline __mmask64 row_bytes_mask(uint8_t bits) {
  uint64_t m = (bits * 0x0101010101010101ULL) & 0x8040201008040201ULL;  // byte q keeps bit q
  m = ((m + 0x7f7f7f7f7f7f7f7fULL) | m) & 0x8080808080808080ULL;        // nonzero byte -> 0x80
  return _cvtu64_mask64((m >> 7) * 0xffULL);
}

// The 8-byte-point types' scale group s of one super-block: rows 0-7 and 8-15 gathered 8 rows x 8
// bytes at a time (dword lanes 2q and 2q+1 hold columns 0-3 and 4-7 of row q) against the group's
// 8 activations broadcast as a qword; the level sums of the 16 rows added to is[t] in row order.
template <GgmlType kType, int NT>
[[gnu::always_inline]] inline void scale_sums_8(const uint8_t* blk, int s, const BlockQ8_K* const* a, int64_t b,
                                                __m512i* is) {
  constexpr IqPackedSpec sp = iq_packed_spec(kType);
  constexpr int kGroupsPerScale = 32 / sp.n_scales;
  const auto* grid = static_cast<const uint8_t*>(sp.grid);
  const __m512i c64 = _mm512_set1_epi8(64);
  const __m512i c1 = _mm512_set1_epi8(1), c2 = _mm512_set1_epi8(2);
  // Lane pairs (2r, 2r+1) of the two 8-row halves folded into row order.
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  __m512i e0[NT], e1[NT];
  for (int t = 0; t < NT; ++t) e0[t] = e1[t] = _mm512_setzero_si512();
  for (int gg = 0; gg < kGroupsPerScale; ++gg) {
    const int g = s * kGroupsPerScale + gg;
    const uint8_t* p = blk + sp.idx_offset() + g * 16 * sp.idx_bytes;
    __m256i i0, i1;
    if constexpr (sp.idx_bytes == 1) {
      i0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
      i1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8)));
    } else {
      i0 = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      i1 = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
    }
    const __m512i w0 = _mm512_i32gather_epi64(i0, grid, 8), w1 = _mm512_i32gather_epi64(i1, grid, 8);
    __m512i wu0, wu1;
    if constexpr (sp.shift) {
      // (point + 1) * 8 stays inside each byte (at most 16), then +2 on the rows shifted up.
      const __m512i s0 = _mm512_slli_epi16(_mm512_add_epi8(w0, c1), 3);
      const __m512i s1 = _mm512_slli_epi16(_mm512_add_epi8(w1, c1), 3);
      wu0 = _mm512_mask_add_epi8(s0, row_bytes_mask(blk[sp.mask_offset() + 2 * g]), s0, c2);
      wu1 = _mm512_mask_add_epi8(s1, row_bytes_mask(blk[sp.mask_offset() + 2 * g + 1]), s1, c2);
    } else {
      __mmask64 n0, n1;
      std::memcpy(&n0, blk + sp.mask_offset() + 16 * g, 8);
      std::memcpy(&n1, blk + sp.mask_offset() + 16 * g + 8, 8);
      wu0 = _mm512_mask_sub_epi8(_mm512_add_epi8(w0, c64), n0, c64, w0);
      wu1 = _mm512_mask_sub_epi8(_mm512_add_epi8(w1, c64), n1, c64, w1);
    }
    for (int t = 0; t < NT; ++t) {
      int64_t a8;
      std::memcpy(&a8, a[t][b].qs + 8 * g, 8);
      const __m512i av = _mm512_set1_epi64(a8);
      e0[t] = _mm512_dpbusd_epi32(e0[t], wu0, av);
      e1[t] = _mm512_dpbusd_epi32(e1[t], wu1, av);
    }
  }
  for (int t = 0; t < NT; ++t)
    is[t] = _mm512_add_epi32(is[t], _mm512_add_epi32(_mm512_permutex2var_epi32(e0[t], even, e1[t]),
                                                     _mm512_permutex2var_epi32(e0[t], odd, e1[t])));
}

// The 4-byte-point types' scale group s: 16 rows x 4 bytes gathered per half group, each against
// its 4 activations broadcast; added to is[t].
template <GgmlType kType, int NT>
[[gnu::always_inline]] inline void scale_sums_4(const uint8_t* blk, int s, const BlockQ8_K* const* a, int64_t b,
                                                __m512i* is) {
  constexpr IqPackedSpec sp = iq_packed_spec(kType);
  constexpr int kGroupsPerScale = 32 / sp.n_scales;
  const auto* grid = static_cast<const uint8_t*>(sp.grid);
  const __m512i c64 = _mm512_set1_epi8(64);
  for (int gg = 0; gg < kGroupsPerScale; ++gg) {
    const int g = s * kGroupsPerScale + gg;
    for (int h = 0; h < 2; ++h) {
      const uint8_t* p = blk + sp.idx_offset() + (2 * g + h) * 16 * sp.idx_bytes;
      __m512i idx;
      if constexpr (sp.idx_bytes == 1)
        idx = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      else
        idx = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
      const __m512i w = _mm512_i32gather_epi32(idx, grid, 4);
      __mmask64 neg;
      std::memcpy(&neg, blk + sp.mask_offset() + 8 * (2 * g + h), 8);
      const __m512i wu = _mm512_mask_sub_epi8(_mm512_add_epi8(w, c64), neg, c64, w);
      for (int t = 0; t < NT; ++t) is[t] = _mm512_dpbusd_epi32(is[t], wu, bcast32(a[t][b].qs + 8 * g + 4 * h));
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
  const __m512 inv_den = _mm512_set1_ps(sp.inv_den);
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * kBytes;
    __m512i tot[NT];
    for (int t = 0; t < NT; ++t) tot[t] = _mm512_setzero_si512();
    for (int s = 0; s < sp.n_scales; ++s) {
      for (int l = 0; l < kLines; ++l)
        _mm_prefetch(reinterpret_cast<const char*>(blk + kBytes + 64 * (kLines * s + l)), _MM_HINT_T0);
      __m512i is[NT];
      for (int t = 0; t < NT; ++t) {
        const int16_t* bs = a[t][b].bsums;
        const int32_t sum = sp.n_scales == 16 ? bs[s] : bs[2 * s] + bs[2 * s + 1];
        is[t] = _mm512_set1_epi32(-sp.offset * sum);
      }
      if constexpr (sp.point_bytes == 8)
        scale_sums_8<kType, NT>(blk, s, a, b, is);
      else
        scale_sums_4<kType, NT>(blk, s, a, b, is);
      const __m512i ls =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + sp.ls_offset() + 16 * s)));
      for (int t = 0; t < NT; ++t) tot[t] = _mm512_add_epi32(tot[t], _mm512_mullo_epi32(is[t], ls));
    }
    const __m512 dw =
        _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk))), inv_den);
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(a[t][b].d)), _mm512_cvtepi32_ps(tot[t]), acc[t]);
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(out + 16 * t, acc[t]);
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

PackedGemmFn packed_gemm_iq_avx512_fn(GgmlType t) {
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
