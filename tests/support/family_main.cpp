// main() of the per-family kernel test binaries (tests/CMakeLists.txt: mla_tests_avx2, built for
// x86-64-v3, and mla_tests_scalar, baseline x86-64). On a CPU that cannot run the family it runs
// nothing and exits 77 (ctest: skipped), saying so. Compiled for baseline x86-64, so that the
// check itself runs anywhere.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  if (std::strcmp(MLA_TEST_FAMILY, "avx2") == 0 && !avx2) {
    std::fprintf(stderr, "mla_tests_avx2: the AVX2 kernel family NOT TESTED: this CPU lacks avx2, fma or f16c\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
