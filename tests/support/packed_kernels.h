#pragma once
// Why the packed AVX-512 GEMM kernels (quant/packed.h) did not run, as the skip message of the
// tests that exercise them. gtest_discover_tests makes a GTEST_SKIP a "Skipped" test in ctest's
// summary; this reason names what the host lacks, so a run on an AVX2-only machine says plainly
// that the default fast path of AVX-512 machines went untested there.
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "gguf/types.h"
#include "quant/quant.h"

namespace mla {

inline std::string packed_kernels_unavailable_reason(GgmlType t) {
  std::string why = "packed AVX-512 GEMM kernels NOT TESTED on this host for " + std::string(ggml_type_name(t)) + ": ";
  if (const char* v = std::getenv("MLA_REPACK"); v != nullptr && std::strcmp(v, "0") == 0)
    return why + "MLA_REPACK=0 turns them off";
  std::string missing;
#if defined(__x86_64__) || defined(__i386__)
  if (!__builtin_cpu_supports("avx512f")) missing += " avx512f";
  if (!__builtin_cpu_supports("avx512bw")) missing += " avx512bw";
  if (!__builtin_cpu_supports("avx512vl")) missing += " avx512vl";
  if (!__builtin_cpu_supports("avx512vnni")) missing += " avx512vnni";
  if (!quant_isa_available(QuantIsa::Avx2)) missing += " avx2/fma/f16c";
#else
  missing = " x86-64 (another architecture)";
#endif
  if (!missing.empty()) return why + "the CPU lacks" + missing + " (the kernels need AVX-512 F/BW/VL/VNNI)";
  return why + "the CPU has AVX-512 F/BW/VL/VNNI and MLA_REPACK is not 0, yet no packed kernel was chosen";
}

}  // namespace mla
