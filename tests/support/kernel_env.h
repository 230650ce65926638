#pragma once
// The test and benchmark binaries' way to choose the quant kernels' family (the product's is the
// --simd and --no-repack flags): MLA_SIMD=avx2|scalar and MLA_REPACK=0 in their environment, read
// by their main() before any kernel is looked up.
#include <cstdlib>
#include <cstring>

#include "quant/kernel_choice.h"

namespace mla {

// The choice the environment asks for, starting from `base` (the binary's own family).
inline KernelChoice kernel_choice_from_env(KernelChoice base = {}) {
  if (const char* v = std::getenv("MLA_SIMD"); v != nullptr && *v != '\0') {
    const SimdLevel asked = parse_simd_level(v, "MLA_SIMD");
    if (asked < base.max_simd) base.max_simd = asked;
  }
  if (const char* v = std::getenv("MLA_REPACK"); v != nullptr && std::strcmp(v, "0") == 0) base.repack = false;
  return base;
}

}  // namespace mla
