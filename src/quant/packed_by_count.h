#pragma once
// Internal: the token-count dispatch every SIMD family of packed GEMM kernels shares
// (packed_avx512.h, packed_avx2.h). Plain C++: it only names the kernel's instantiations, so it
// may be included from files compiled for any instruction set.
#include <cstdint>

#include "quant/packed.h"

namespace mla::quant {

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
