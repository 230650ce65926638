// AVX2 quantization of activation rows (F16, BF16, Q8_0, Q8_K), bit-exact with quantize.cpp for
// finite inputs: the same scalar scale arithmetic, the same rounding (round-half-away for Q8_0,
// round-half-even for Q8_K), the same tie-break for the value of largest magnitude.
#include "quant/kernels.h"
MLA_NO_FP_CONTRACT

#include <cstring>

#include "quant/simd_avx2.h"
#include "util/ggml_blocks.h"

namespace mla::quant {
namespace {

using namespace avx2;

inline __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// Four vectors of 8 int32 (elements 0-7, 8-15, 16-23, 24-31) → 32 int8 in element order.
inline __m256i pack_i32x32_to_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b);  // lanes interleave: a0-3 b0-3 | a4-7 b4-7
  const __m256i cd = _mm256_packs_epi32(c, d);
  const __m256i abcd = _mm256_packs_epi16(ab, cd);  // a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7
  return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

void quant_f16(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

void quant_bf16(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<uint16_t*>(dst);
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000);
  const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7FFF), quiet = _mm256_set1_epi32(0x40);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(u, 16), one))), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    const __m256i quieted = _mm256_or_si256(_mm256_srli_epi32(u, 16), quiet);
    const __m256i r = _mm256_blendv_epi8(rounded, quieted, nan);
    // 8 uint32 holding 16-bit values → 8 uint16.
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), packed);
  }
  for (; i < n; ++i) y[i] = fp32_to_bf16(x[i]);
}

// round-half-away-from-zero (std::round) of values with |v| < 2^23: truncate, then step away
// from zero where the dropped fraction is at least one half (the fraction is exact).
inline __m256 round_half_away(__m256 v) {
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 frac = abs_ps(_mm256_sub_ps(v, t));
  const __m256 step = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, _mm256_set1_ps(-0.0f)));
  return _mm256_add_ps(t, _mm256_and_ps(step, _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ)));
}

void quant_q8_0(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    __m256 v[4];
    for (int k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(x + 8 * k);
    const float amax =
        hmax(_mm256_max_ps(_mm256_max_ps(abs_ps(v[0]), abs_ps(v[1])), _mm256_max_ps(abs_ps(v[2]), abs_ps(v[3]))));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    const __m256 vid = _mm256_set1_ps(id);
    __m256i q[4];
    const __m256 lim = _mm256_set1_ps(127.0f), neg_lim = _mm256_set1_ps(-127.0f);
    for (int k = 0; k < 4; ++k)
      q[k] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(round_half_away(_mm256_mul_ps(v[k], vid)), neg_lim), lim));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(b[i].qs), pack_i32x32_to_i8(q[0], q[1], q[2], q[3]));
  }
}

void quant_q8_k(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    __m256 m = _mm256_setzero_ps();
    for (int k = 0; k < kQK_K; k += 8) m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + k)));
    const float amax = hmax(m);
    if (amax == 0.0f) {
      std::memset(&b[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    // The first element of largest magnitude sets the sign of the scale, as in the reference.
    float max = 0.0f;
    const __m256 vamax = _mm256_set1_ps(amax);
    for (int k = 0; k < kQK_K; k += 8) {
      const int mask = _mm256_movemask_ps(_mm256_cmp_ps(abs_ps(_mm256_loadu_ps(x + k)), vamax, _CMP_EQ_OQ));
      if (mask) {
        max = x[k + __builtin_ctz(static_cast<unsigned>(mask))];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const __m256 vis = _mm256_set1_ps(iscale);
    const __m256i cap = _mm256_set1_epi32(127);
    for (int k = 0; k < kQK_K; k += 32) {
      __m256i q[4];
      for (int j = 0; j < 4; ++j) {
        const __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + k + 8 * j), vis),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q[j] = _mm256_min_epi32(_mm256_cvtps_epi32(v), cap);
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(b[i].qs + k), pack_i32x32_to_i8(q[0], q[1], q[2], q[3]));
      // Sums of the two 16-element groups of these 32.
      const __m256i g0 = _mm256_add_epi32(q[0], q[1]), g1 = _mm256_add_epi32(q[2], q[3]);
      __m256i h = _mm256_hadd_epi32(g0, g1);  // g0 pairs | g1 pairs, per lane
      h = _mm256_hadd_epi32(h, h);
      const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
      b[i].bsums[k / 16] = static_cast<int16_t>(_mm_extract_epi32(s, 0));
      b[i].bsums[k / 16 + 1] = static_cast<int16_t>(_mm_extract_epi32(s, 1));
    }
    b[i].d = 1.0f / iscale;
  }
}

}  // namespace

QuantizeFn quantize_avx2_fn(GgmlType t) {
  switch (t) {
    case GgmlType::F16:
      return quant_f16;
    case GgmlType::BF16:
      return quant_bf16;
    case GgmlType::Q8_0:
      return quant_q8_0;
    case GgmlType::Q8_K:
      return quant_q8_k;
    default:
      return nullptr;
  }
}

}  // namespace mla::quant
