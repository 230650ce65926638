#pragma once
// Internal: what the AVX2 packed GEMM kernels share (packed_avx2.cpp, packed_nibble_avx2.cpp,
// packed_iq_avx2.cpp, packed_iqk_avx2.cpp). Include it only from files compiled for AVX2 (*_avx2.cpp): everything here
// is static, so no copy can be merged by the linker into code that runs on other CPUs.
//
// The kernels read the AVX-512 layouts (packed.h, packed_nibble.h, packed_iq.h) as two 256-bit
// halves: bytes 0-31 of a 64-byte entry are rows 0-7, bytes 32-63 rows 8-15, so int32 lane i of
// half h is row 8h + i. Without VNNI the unsigned-by-signed byte products go through vpmaddubsw,
// whose int16 pair sums saturate: each kernel states why its operands cannot reach that (the
// activations from quantize_row lie in [-127, 127]; the bounds below allow -128 where they can).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/packed.h"
#include "quant/packed_by_count.h"
#include "util/ggml_blocks.h"

namespace mla::quant::avx2p {

// 4 bytes broadcast to every 32-bit lane: 4 activations against a lane's 4 weights.
static inline __m256i bcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

static inline int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Half h (rows 8h..8h+7) of a 64-byte entry.
static inline __m256i half(const uint8_t* entry, int h) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(entry + 32 * h));
}

// 8 fp16 values as floats.
static inline __m256 f16x8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// 8 bytes (one per row) as int16 pairs (x, x): the operand of vpmaddwd that multiplies both
// int16 halves of a row's lane by the row's scale.
static inline __m256i u8_pairs(const uint8_t* p) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(b, b));
}
static inline __m256i i8_pairs(const uint8_t* p) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(b, b));
}

// Rows 8h..8h+7 of two per-row int8 scale vectors (16 bytes each) as int16 pairs (x0[r], x1[r]).
static inline __m256i i8_interleave(const uint8_t* x0, const uint8_t* x1, int h) {
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x0));
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x1));
  return _mm256_cvtepi8_epi16(h == 0 ? _mm_unpacklo_epi8(a, b) : _mm_unpackhi_epi8(a, b));
}

// int16 pairs summed into int32 lanes.
// A kernel's float accumulators acc[h][t]: rows 8h..8h+7 of token t, stored as out[16 t + r].
template <int NT>
static inline void zero_halves(__m256 (&acc)[2][NT]) {
  for (auto& half_acc : acc)
    for (auto& v : half_acc) v = _mm256_setzero_ps();
}
template <int NT>
static inline void store_halves(const __m256 (&acc)[2][NT], float* out) {
  for (int t = 0; t < NT; ++t)
    for (int h = 0; h < 2; ++h) _mm256_storeu_ps(out + 16 * t + 8 * h, acc[h][t]);
}

static inline __m256i sum_pairs(__m256i p) { return _mm256_madd_epi16(p, _mm256_set1_epi16(1)); }

// A super-block's float step against Q8_K for one half's rows, in the twins' order:
// acc[t] += (d x a[t].d) x tot[t], with dw the half's row scales d.
template <int NT>
static inline void add_scaled_sums(__m256 dw, const BlockQ8_K* const* a, int64_t b, const __m256i* tot, __m256* acc) {
  for (int t = 0; t < NT; ++t)
    acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(a[t][b].d)), _mm256_cvtepi32_ps(tot[t]), acc[t]);
}

// Bit i of m set -> byte i all ones (32 bits -> 32 bytes).
static inline __m256i expand_mask32(uint32_t m) {
  const __m256i sel =
      _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int32_t>(m)), sel);
  return _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
}

// Kernel K (by_count's interface) over at most 4 tokens per call: where 8 tokens' sums do not fit
// the 16 ymm registers, the spills cost more than rebuilding the weight operands twice. Each
// token's result is the same whichever call it is in.
template <typename K>
struct InFours {
  template <int NT>
  static void run(int64_t n, const uint8_t* g, const uint8_t* a, int64_t s, float* o) {
    if constexpr (NT > 4) {
      K::template run<4>(n, g, a, s, o);
      K::template run<NT - 4>(n, g, a + 4 * s, s, o + 4 * kPackedRows);
    } else {
      K::template run<NT>(n, g, a, s, o);
    }
  }
};

}  // namespace mla::quant::avx2p
