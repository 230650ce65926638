#pragma once
// Internal: what the AVX-512 packed GEMM kernels share (packed_avx512.cpp, packed_nibble_avx512.cpp,
// packed_iq_avx512.cpp; the token-count dispatch is packed_by_count.h). Include it only from files compiled for AVX-512
// (*_avx512.cpp): everything here is static, so no copy can be merged by the linker into code that runs on other CPUs.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/packed.h"
#include "quant/packed_by_count.h"

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

}  // namespace mla::quant
