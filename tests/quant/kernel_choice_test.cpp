// The quant kernels' family, chosen once at start-up (quant/kernel_choice.h): the test binaries'
// main() choose it (support/test_main.cpp, support/family_main.cpp), the product's --simd flag.
#include "quant/kernel_choice.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "quant/packed.h"
#include "quant/quant.h"
#include "util/error.h"

namespace mla {
namespace {

TEST(KernelChoice, ParsesTheFlagValuesAndNamesABadOne) {
  EXPECT_EQ(parse_simd_level("auto", "--simd"), SimdLevel::Avx512);
  EXPECT_EQ(parse_simd_level("avx512", "--simd"), SimdLevel::Avx512);
  EXPECT_EQ(parse_simd_level("avx2", "--simd"), SimdLevel::Avx2);
  EXPECT_EQ(parse_simd_level("scalar", "--simd"), SimdLevel::Scalar);
  try {
    parse_simd_level("sse4", "--simd");
    FAIL() << "sse4 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--simd 'sse4'"), std::string::npos) << e.what();
  }
  EXPECT_STREQ(simd_level_name(SimdLevel::Avx2), "avx2");
}

TEST(KernelChoice, AChangeAfterTheFirstLookupIsRefused) {
  const KernelChoice now = kernel_choice();  // a read: the dispatch tables may hold these kernels
  EXPECT_NO_THROW(set_kernel_choice(now));
  KernelChoice other = now;
  other.repack = !now.repack;
  EXPECT_THROW(set_kernel_choice(other), Error);
  EXPECT_EQ(kernel_choice(), now);
}

// The family binaries run their own family's kernels: were the choice not made (or not reach the
// dispatch), an AVX-512 or AVX2 host would run its best kernels here instead.
TEST(KernelFamily, SelectedAtStartUp) {
  const SimdLevel level = simd_level();
  EXPECT_LE(level, cpu_simd_level());
  EXPECT_EQ(quant_isa_available(QuantIsa::Avx2), level >= SimdLevel::Avx2);
  const char* packed = packed_gemm_family();
  if (!kernel_choice().repack || level == SimdLevel::Scalar)
    EXPECT_STREQ(packed, "none");
  else
    EXPECT_STREQ(packed, simd_level_name(level));
#if defined(MLA_TEST_FAMILY)
  const SimdLevel family = std::strcmp(MLA_TEST_FAMILY, "avx2") == 0 ? SimdLevel::Avx2 : SimdLevel::Scalar;
  EXPECT_EQ(kernel_choice().max_simd, family) << MLA_TEST_FAMILY;
  EXPECT_EQ(level, family) << MLA_TEST_FAMILY;
  // The row dot product the dispatch returns is the family's: the scalar reference exactly when
  // the family is scalar.
  EXPECT_EQ(vec_dot_fn(GgmlType::Q8_0) == find_vec_dot(GgmlType::Q8_0, QuantIsa::Ref), family == SimdLevel::Scalar);
#endif
}

}  // namespace
}  // namespace mla
