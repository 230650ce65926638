#pragma once
// Internal: small AVX2 helpers shared by the *_avx2.cpp files. Include only from files compiled
// with -mavx2 -mfma -mf16c. Functions are `static` so no copy escapes those files (see util/ggml_blocks.h).
#include <immintrin.h>

#include <cstdint>

#include "util/ggml_blocks.h"

namespace mla::quant::avx2 {

static inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

static inline float hsum(__m128 s) {
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

static inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

// 16 bytes of packed nibbles → 32 bytes: the low nibbles (elements 0-15) in the low lane, the
// high nibbles (elements 16-31) in the high lane — the element order of Q4_0-style blocks.
static inline __m256i unpack_nibbles_32(const uint8_t* qs) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// Signed int8 x signed int8, summed in pairs and then in quads: 8 int32 lanes, each the sum of
// 4 adjacent products. Uses |x| as the unsigned operand of maddubs, so it needs y != -128
// wherever x < 0 (Q8 activations from quantize_row lie in [-127, 127]). The int16 pair sums
// stay below 2*128*127 and cannot saturate. Where the compiler targets a CPU with VNNI (a native
// build on such a CPU) one vpdpbusd does both steps; the integer results are the same.
static inline __m256i dot_i8_quads(__m256i x, __m256i y) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
#elif defined(__AVXVNNI__)
  return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
#else
  const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
#endif
}

// Broadcasts int16 lane i (0-7) of the 128-bit value duplicated in both lanes of s.
static inline __m256i broadcast_i16(__m256i s, int i) {
  return _mm256_shuffle_epi8(s, _mm256_set1_epi16(static_cast<int16_t>(((2 * i + 1) << 8) | (2 * i))));
}

// The unsigned 6-bit levels (q + 32) of half h (elements 128h .. 128h+127) of a Q6_K block:
// q[k] holds elements 128h + 32k .. +31. Low 4 bits from ql, high 2 bits from qh.
static inline void unpack_q6_k_half(const BlockQ6_K& b, int h, __m256i q[4]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03);
  const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h));
  const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h + 32));
  const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * h));
  q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
  q[1] =
      _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
  q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
  q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
}

}  // namespace mla::quant::avx2
