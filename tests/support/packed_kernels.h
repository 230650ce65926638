#pragma once
// Why the packed SIMD GEMM kernels (quant/packed.h) did not run, as the skip message of the tests
// that exercise them. gtest_discover_tests makes a GTEST_SKIP a "Skipped" test in ctest's
// summary; this reason names what the host or the environment lacks, so a run without them says
// plainly which fast path went untested there. The families: AVX-512 F/BW/VL/VNNI kernels where
// the CPU has them, else AVX2+FMA+F16C kernels (the avx2 family's choice forces these on an
// AVX-512 CPU: quant/kernel_choice.h), else none (the scalar family keeps row dot products).
#include <string>
#include <string_view>

#include "quant/kernel_choice.h"
#include "quant/packed.h"
#include "quant/quant.h"
#include "util/ggml_type.h"

namespace mla {

inline std::string packed_kernels_unavailable_reason(GgmlType t) {
  std::string why = "packed GEMM kernels NOT TESTED on this host for " + std::string(ggml_type_name(t)) + ": ";
  if (!kernel_choice().repack) return why + "repacking is off (MLA_REPACK=0)";
  if (kernel_choice().max_simd == SimdLevel::Scalar)
    return why + "the scalar kernel family is chosen, which has none (row dot products only)";
#if defined(__x86_64__) || defined(__i386__)
  if (!quant_isa_available(QuantIsa::Avx2))
    return why + "the CPU lacks avx2/fma/f16c (the AVX2 family needs them; the AVX-512 one also F/BW/VL/VNNI)";
  return why + "the " + packed_gemm_family() + " packed family has no kernel for this type (row dot products run it)";
#else
  return why + "they need x86-64 (this is another architecture)";
#endif
}

}  // namespace mla
