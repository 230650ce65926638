#include "quant/kernel_choice.h"

#include <algorithm>
#include <atomic>

#include "util/error.h"

namespace mla {
namespace {

KernelChoice g_choice;
// Set by the first read: from then on the dispatch tables may hold kernels of g_choice.
std::atomic<bool> g_read{false};

}  // namespace

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::Avx512:
      return "avx512";
    case SimdLevel::Avx2:
      return "avx2";
    case SimdLevel::Scalar:
      break;
  }
  return "scalar";
}

SimdLevel parse_simd_level(std::string_view value, std::string_view what) {
  if (value == "auto" || value == "avx512") return SimdLevel::Avx512;
  if (value == "avx2") return SimdLevel::Avx2;
  if (value == "scalar") return SimdLevel::Scalar;
  fail("{} '{}': expected auto, avx512, avx2 or scalar", what, value);
}

void set_kernel_choice(const KernelChoice& choice) {
  if (g_read.load(std::memory_order_relaxed) && !(choice == g_choice))
    fail("kernel choice (simd {}, repack {}) set after the first kernel lookup, which used simd {}, repack {}",
         simd_level_name(choice.max_simd), choice.repack ? "on" : "off", simd_level_name(g_choice.max_simd),
         g_choice.repack ? "on" : "off");
  g_choice = choice;
}

const KernelChoice& kernel_choice() {
  g_read.store(true, std::memory_order_relaxed);
  return g_choice;
}

SimdLevel simd_level() { return std::min(kernel_choice().max_simd, cpu_simd_level()); }

}  // namespace mla
