// main() of mla_tests: the quant kernels' family from MLA_SIMD / MLA_REPACK (support/kernel_env.h;
// by default the best this CPU runs), then every test.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kernel_env.h"

int main(int argc, char** argv) {
  mla::set_kernel_choice(mla::kernel_choice_from_env());
  ::testing::InitGoogleMock(&argc, argv);
  return RUN_ALL_TESTS();
}
