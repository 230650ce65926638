#pragma once
// Internal: what the AVX-512 packed GEMM kernels share (packed_avx512.cpp, packed_nibble_avx512.cpp,
// packed_iq_avx512.cpp). Include it only from files compiled for AVX-512 (*_avx512.cpp): everything
// here is static, so no copy can be merged by the linker into code that runs on other CPUs.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/packed.h"

namespace mla::quant {

// 4 bytes broadcast to every 32-bit lane: 4 activations for vpdpbusd.
static inline __m512i bcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

static inline int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

static inline __m512i load512(const uint8_t* p) { return _mm512_loadu_si512(p); }

static inline __m512 load_f16x16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// The PackedGemmFn of a kernel K with `template <int NT> static void run(n_cols, group, act,
// act_stride, out)`: one instantiation per token count, chosen at run time.
template <typename K>
static void by_count(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, int n_tok,
                     float* out) {
  static_assert(kPackedMaxTokens == 8, "instantiates 1..8 tokens");
  switch (n_tok) {
    case 1:
      return K::template run<1>(n_cols, group, act, act_stride, out);
    case 2:
      return K::template run<2>(n_cols, group, act, act_stride, out);
    case 3:
      return K::template run<3>(n_cols, group, act, act_stride, out);
    case 4:
      return K::template run<4>(n_cols, group, act, act_stride, out);
    case 5:
      return K::template run<5>(n_cols, group, act, act_stride, out);
    case 6:
      return K::template run<6>(n_cols, group, act, act_stride, out);
    case 7:
      return K::template run<7>(n_cols, group, act, act_stride, out);
    case 8:
      return K::template run<8>(n_cols, group, act, act_stride, out);
    default:
      return;
  }
}

}  // namespace mla::quant
