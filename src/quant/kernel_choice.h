#pragma once
// Which of the quant library's kernel families this process runs (the row dot products, the
// activation quantizers and the packed GEMM; the attention kernels are fixed by the build's target).
// Chosen once at start-up, before the first kernel lookup: the command line's --simd and
// --no-repack through cli/engine_args.h, a test or benchmark binary's main(). The dispatch tables
// resolve on first use and keep what they found, so a later change is refused.
#include <string_view>

namespace mla {

// Ordered: each level runs the kernels of the ones below it too.
enum class SimdLevel { Scalar, Avx2, Avx512 };

struct KernelChoice {
  SimdLevel max_simd = SimdLevel::Avx512;  // the highest family used; the CPU may cap it lower
  bool repack = true;  // repack weights into 16-row groups for the packed GEMM where the family has one
  bool operator==(const KernelChoice&) const = default;
};

// "scalar" | "avx2" | "avx512".
const char* simd_level_name(SimdLevel level);
// "auto" (the CPU's best) | "avx512" | "avx2" | "scalar"; throws mla::Error naming `what` and the
// value for anything else.
SimdLevel parse_simd_level(std::string_view value, std::string_view what);

// The best family this CPU runs: Avx512 needs AVX-512 F/BW/VL/VNNI besides AVX2; Avx2 needs
// AVX2, FMA and F16C; anything else (or another architecture) is Scalar. (In dispatch.cpp.)
SimdLevel cpu_simd_level();

// Sets the choice for the rest of the process. Setting the same choice again is allowed; a
// different one after a kernel was looked up throws mla::Error. A max_simd above
// cpu_simd_level() is not refused here (the CPU caps it): callers that take it from a user check.
void set_kernel_choice(const KernelChoice& choice);
const KernelChoice& kernel_choice();

// The family that runs: the lower of the choice's max_simd and cpu_simd_level().
SimdLevel simd_level();

}  // namespace mla
