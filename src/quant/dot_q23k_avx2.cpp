// AVX2+FMA dot products of the 2- and 3-bit K-quants (Q2_K, Q3_K) with Q8_K activations, the
// low-bit formats of small DeepSeek/Kimi quantizations. Same scheme as dot_avx2.cpp's Q6_K:
// unsigned levels through maddubs, 16-element group scales through madd, and the constant part
// of each level folded in once per super-block from the activation bsums.
#include <cstring>

#include "quant/kernels.h"
#include "quant/simd_avx2.h"
#include "util/ggml_blocks.h"

namespace mla::quant {
namespace {

using namespace avx2;

inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// pshufb controls that put int16 group scale 2k (low lane) and 2k+1 (high lane) in every slot.
inline __m256i pair_ctrl(int k) {
  const auto lo = static_cast<int16_t>(((4 * k + 1) << 8) | (4 * k));
  const auto hi = static_cast<int16_t>(((4 * k + 3) << 8) | (4 * k + 2));
  return _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo));
}

// sum over the 256 elements of scale[group] * u[e] * a[e], where Levels(h, s) returns the 32
// unsigned levels u of elements 128h + 32s .. +31 and scales16 holds the 16 group scales.
template <typename Levels>
inline __m256i scaled_sum(const __m256i scales16, const int8_t* a, Levels levels) {
  const __m256i ctrl[4] = {pair_ctrl(0), pair_ctrl(1), pair_ctrl(2), pair_ctrl(3)};
  __m256i sum = _mm256_setzero_si256();
  for (int h = 0; h < 2; ++h) {
    const __m256i sc = h == 0 ? _mm256_permute2x128_si256(scales16, scales16, 0x00)
                              : _mm256_permute2x128_si256(scales16, scales16, 0x11);
    for (int s = 0; s < 4; ++s) {
      const __m256i p = _mm256_maddubs_epi16(levels(h, s), load32(a + 128 * h + 32 * s));
      sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p, _mm256_shuffle_epi8(sc, ctrl[s])));
    }
  }
  return sum;
}

// Q3_K's 16 signed scales (see unpack_q3_k_scales) on 32-bit words: scales 4k..4k+3 take their
// low nibbles from bytes 0-3 or 4-7 (k even/odd; low or high nibble for k < 2 or k >= 2) and
// their high 2 bits from bits 2k..2k+1 of bytes 8-11.
inline __m128i q3_k_scales(const uint8_t* packed) {
  uint32_t w[3];
  std::memcpy(w, packed, 12);
  const uint32_t lo[4] = {w[0] & 0x0F0F0F0F, w[1] & 0x0F0F0F0F, (w[0] >> 4) & 0x0F0F0F0F, (w[1] >> 4) & 0x0F0F0F0F};
  uint32_t s[4];
  for (int k = 0; k < 4; ++k) s[k] = lo[k] | (((w[2] >> (2 * k)) & 0x03030303) << 4);
  const __m128i biased =
      _mm_setr_epi32(static_cast<int>(s[0]), static_cast<int>(s[1]), static_cast<int>(s[2]), static_cast<int>(s[3]));
  return _mm_sub_epi8(biased, _mm_set1_epi8(32));
}

}  // namespace

// Q2_K: x = d * (scale & 15) * q - dmin * (scale >> 4), q in 0..3.
float dot_q2_k_avx2(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ2_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i m3 = _mm256_set1_epi8(3);
  __m256 acc = _mm256_setzero_ps();
  __m256 acc_m = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = y[i].d * half_to_float(x[i].d);
    const float dmin = -y[i].d * half_to_float(x[i].dmin);
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales));
    const __m256i mins16 =
        _mm256_cvtepu8_epi16(_mm_srli_epi16(_mm_and_si128(packed, _mm_set1_epi8(static_cast<char>(0xF0))), 4));
    const __m256i scales16 = _mm256_cvtepu8_epi16(_mm_and_si128(packed, _mm_set1_epi8(0x0F)));
    const __m256i bsums = load32(y[i].bsums);
    acc_m = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(_mm256_madd_epi16(mins16, bsums)), acc_m);
    const __m256i q[2] = {load32(x[i].qs), load32(x[i].qs + 32)};
    const __m256i sum = scaled_sum(scales16, y[i].qs, [&](int h, int s) {
      return _mm256_and_si256(_mm256_srl_epi16(q[h], _mm_cvtsi32_si128(2 * s)), m3);
    });
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sum), acc);
  }
  return hsum(_mm256_add_ps(acc, acc_m));
}

// Q3_K: x = d * scale * (u - 4) with u = low 2 bits + 4 * hmask bit, in 0..7.
float dot_q3_k_avx2(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ3_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = y[i].d * half_to_float(x[i].d);
    const __m256i scales16 = _mm256_cvtepi8_epi16(q3_k_scales(x[i].scales));
    const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(scales16, load32(y[i].bsums)), 2);
    const __m256i q[2] = {load32(x[i].qs), load32(x[i].qs + 32)};
    const __m256i hmask = load32(x[i].hmask);
    const __m256i sum = scaled_sum(scales16, y[i].qs, [&](int h, int s) {
      const __m128i lo_shift = _mm_cvtsi32_si128(2 * s), hi_shift = _mm_cvtsi32_si128(4 * h + s);
      const __m256i lo = _mm256_and_si256(_mm256_srl_epi16(q[h], lo_shift), m3);
      const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(hmask, hi_shift), one);
      return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 2));
    });
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_sub_epi32(sum, offset)), acc);
  }
  return hsum(acc);
}

}  // namespace mla::quant
