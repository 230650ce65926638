// AVX2 dequantization for the common weight types, bit-exact with dequant_ref.cpp: the same
// scalar scale products, then one vector multiply and one subtract per element (contraction
// into FMA is disabled, as it would round once instead of twice).
#include "quant/kernels.h"
MLA_NO_FP_CONTRACT

#include "quant/simd_avx2.h"
#include "util/ggml_blocks.h"

namespace mla::quant {
namespace {

using namespace avx2;

// 8 int8 → 8 floats.
inline __m256 cvt_i8x8(const void* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(static_cast<const __m128i*>(p))));
}
// Bytes 8j..8j+7 of a 32-byte vector of small unsigned values → 8 floats.
inline __m256 cvt_u8x8(__m256i v, int j) {
  const __m128i half = j < 2 ? _mm256_castsi256_si128(v) : _mm256_extracti128_si256(v, 1);
  const __m128i part = (j % 2) == 0 ? half : _mm_srli_si128(half, 8);
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(part));
}

void dequant_f16(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(src);
  const __m256i exp_mask = _mm256_set1_epi32(0x7C00);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
    __m256 f = _mm256_cvtph_ps(h);
    // vcvtph2ps quiets signalling NaNs; the reference keeps the payload bits as they are.
    const __m256i h32 = _mm256_cvtepu16_epi32(h);
    const __m256i special = _mm256_cmpeq_epi32(_mm256_and_si256(h32, exp_mask), exp_mask);
    if (!_mm256_testz_si256(special, special)) {
      const __m256i bits =
          _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x8000)), 16),
                          _mm256_or_si256(_mm256_set1_epi32(0x7F800000),
                                          _mm256_slli_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x3FF)), 13)));
      f = _mm256_blendv_ps(f, _mm256_castsi256_ps(bits), _mm256_castsi256_ps(special));
    }
    _mm256_storeu_ps(y + i, f);
  }
  for (; i < n; ++i) y[i] = fp16_to_fp32(x[i]);
}

void dequant_bf16(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    _mm256_storeu_ps(y + i, _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16)));
  }
  for (; i < n; ++i) y[i] = bf16_to_fp32(x[i]);
}

void dequant_q8_0(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const __m256 d = _mm256_set1_ps(half_to_float(b[i].d));
    for (int j = 0; j < 4; ++j) _mm256_storeu_ps(y + 8 * j, _mm256_mul_ps(cvt_i8x8(b[i].qs + 8 * j), d));
  }
}

void dequant_q4_0(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ4_0*>(src);
  const __m256i eight = _mm256_set1_epi8(8);
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const __m256 d = _mm256_set1_ps(half_to_float(b[i].d));
    alignas(32) int8_t q[32];
    _mm256_store_si256(reinterpret_cast<__m256i*>(q), _mm256_sub_epi8(unpack_nibbles_32(b[i].qs), eight));
    for (int j = 0; j < 4; ++j) _mm256_storeu_ps(y + 8 * j, _mm256_mul_ps(cvt_i8x8(q + 8 * j), d));
  }
}

// Stores dl * q - ml for 32 levels (bytes of v).
inline void store_affine_32(float* y, __m256i v, float dl, float ml) {
  const __m256 d = _mm256_set1_ps(dl), m = _mm256_set1_ps(ml);
  for (int j = 0; j < 4; ++j) _mm256_storeu_ps(y + 8 * j, _mm256_sub_ps(_mm256_mul_ps(d, cvt_u8x8(v, j)), m));
}

void dequant_q4_k(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ4_K*>(src);
  const __m256i low_mask = _mm256_set1_epi8(0x0F);
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K) {
    const float d = half_to_float(b[i].d), dmin = half_to_float(b[i].dmin);
    uint8_t sc[8], mn[8];
    unpack_k4_scales(b[i].scales, sc, mn);
    for (int c = 0; c < 4; ++c) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qs + 32 * c));
      store_affine_32(y + 64 * c, _mm256_and_si256(q, low_mask), d * sc[2 * c], dmin * mn[2 * c]);
      store_affine_32(y + 64 * c + 32, _mm256_and_si256(_mm256_srli_epi16(q, 4), low_mask), d * sc[2 * c + 1],
                      dmin * mn[2 * c + 1]);
    }
  }
}

void dequant_q5_k(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ5_K*>(src);
  const __m256i low_mask = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K) {
    const float d = half_to_float(b[i].d), dmin = half_to_float(b[i].dmin);
    uint8_t sc[8], mn[8];
    unpack_k4_scales(b[i].scales, sc, mn);
    __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qh));
    for (int c = 0; c < 4; ++c) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qs + 32 * c));
      const __m256i lo =
          _mm256_or_si256(_mm256_and_si256(q, low_mask), _mm256_slli_epi16(_mm256_and_si256(bits, one), 4));
      const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), low_mask),
                                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bits, 1), one), 4));
      bits = _mm256_srli_epi16(bits, 2);
      store_affine_32(y + 64 * c, lo, d * sc[2 * c], dmin * mn[2 * c]);
      store_affine_32(y + 64 * c + 32, hi, d * sc[2 * c + 1], dmin * mn[2 * c + 1]);
    }
  }
}

void dequant_q6_k(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ6_K*>(src);
  const __m256i bias = _mm256_set1_epi8(32);
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K) {
    const float d = half_to_float(b[i].d);
    for (int h = 0; h < 2; ++h) {
      __m256i q[4];
      unpack_q6_k_half(b[i], h, q);
      for (int k = 0; k < 4; ++k) {
        alignas(32) int8_t lv[32];
        _mm256_store_si256(reinterpret_cast<__m256i*>(lv), _mm256_sub_epi8(q[k], bias));
        float* out = y + 128 * h + 32 * k;
        for (int half = 0; half < 2; ++half) {  // 16 elements per scale
          const __m256 dl = _mm256_set1_ps(d * b[i].scales[8 * h + 2 * k + half]);
          _mm256_storeu_ps(out + 16 * half, _mm256_mul_ps(dl, cvt_i8x8(lv + 16 * half)));
          _mm256_storeu_ps(out + 16 * half + 8, _mm256_mul_ps(dl, cvt_i8x8(lv + 16 * half + 8)));
        }
      }
    }
  }
}

}  // namespace

DequantizeFn dequantize_avx2_fn(GgmlType t) {
  switch (t) {
    case GgmlType::F16:
      return dequant_f16;
    case GgmlType::BF16:
      return dequant_bf16;
    case GgmlType::Q8_0:
      return dequant_q8_0;
    case GgmlType::Q4_0:
      return dequant_q4_0;
    case GgmlType::Q4_K:
      return dequant_q4_k;
    case GgmlType::Q5_K:
      return dequant_q5_k;
    case GgmlType::Q6_K:
      return dequant_q6_k;
    default:
      return nullptr;
  }
}

}  // namespace mla::quant
