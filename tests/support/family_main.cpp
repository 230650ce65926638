// main() of the per-family kernel test binaries (tests/CMakeLists.txt: mla_tests_avx2, built for
// x86-64-v3, and mla_tests_scalar, baseline x86-64). On a CPU that cannot run the family it runs
// nothing and exits 77 (ctest: skipped), saying so. Otherwise it sets the quant kernels' family to
// the binary's own (MLA_REPACK=0 and a lower MLA_SIMD still apply: support/kernel_env.h), so that
// the run-time dispatch picks that family's kernels too. Compiled for baseline x86-64, so that the
// check itself runs anywhere.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "kernel_env.h"

int main(int argc, char** argv) {
  const bool avx2_family = std::strcmp(MLA_TEST_FAMILY, "avx2") == 0;
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  if (avx2_family && !avx2) {
    std::fprintf(stderr, "mla_tests_avx2: the AVX2 kernel family NOT TESTED: this CPU lacks avx2, fma or f16c\n");
    return 77;
  }
  mla::set_kernel_choice(mla::kernel_choice_from_env(
      {.max_simd = avx2_family ? mla::SimdLevel::Avx2 : mla::SimdLevel::Scalar, .repack = true}));
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
