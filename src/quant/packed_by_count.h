#pragma once
// Internal: the token-count dispatch every SIMD family of packed GEMM kernels shares
// (packed_avx512.h, packed_avx2.h). Plain C++: it only names the kernel's instantiations, so it
// may be included from files compiled for any instruction set.
#include <cstdint>
#include <utility>

#include "quant/packed.h"

namespace mla::quant {

// K::run<I + 1> for the I + 1 == n_tok of the sequence.
template <typename K, int... I>
inline void run_by_count(int n_tok, int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride,
                         float* out, std::integer_sequence<int, I...>) {
  (void)((n_tok == I + 1 && (K::template run<I + 1>(n_cols, group, act, act_stride, out), true)) || ...);
}

// The PackedGemmFn of a kernel K with `template <int NT> static void run(n_cols, group, act,
// act_stride, out)` for NT = 1..kMax: one instantiation per token count, chosen at run time; a
// call of more than kMax tokens (up to kPackedMaxTokens) runs as calls of kMax and the rest,
// which gives the same bits (a row's result never depends on the other tokens of the call).
template <typename K, int kMax = 8>
static void by_count(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, int n_tok,
                     float* out) {
  static_assert(kMax >= 1 && kMax <= kPackedMaxTokens);
  for (; n_tok > kMax; n_tok -= kMax, act += kMax * act_stride, out += kMax * kPackedRows)
    K::template run<kMax>(n_cols, group, act, act_stride, out);
  run_by_count<K>(n_tok, n_cols, group, act, act_stride, out, std::make_integer_sequence<int, kMax>{});
}

}  // namespace mla::quant
