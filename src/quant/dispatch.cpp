// The one boundary where a tensor type becomes a kernel: per type, the AVX2 kernel when this
// CPU has AVX2+FMA+F16C and one exists, else the scalar reference. Unsupported types fail
// here, by name.
#include <fmt/format.h>

#include "quant/kernel_choice.h"
#include "quant/kernels.h"
#include "util/error.h"

namespace mla {
namespace {

[[noreturn]] void fail_unsupported(GgmlType t) { fail("tensor type {} is not supported yet", ggml_type_name(t)); }

void check_row(GgmlType t, int64_t n) {
  const int64_t block = ggml_traits(t).block_elems;
  if (n < 0 || n % block != 0)
    fail("row of {} elements is not a multiple of the {} block size {}", n, ggml_type_name(t), block);
}

}  // namespace

// Here with the CPU checks of the dispatch (clang-tidy skips this file: clang 14 rejects
// __builtin_cpu_supports("f16c")).
SimdLevel cpu_simd_level() {
#if defined(__x86_64__) || defined(__i386__)
  static const SimdLevel level = [] {
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !__builtin_cpu_supports("f16c"))
      return SimdLevel::Scalar;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512vnni"))
      return SimdLevel::Avx512;
    return SimdLevel::Avx2;
  }();
  return level;
#else
  return SimdLevel::Scalar;
#endif
}

namespace quant {

// The family chosen at start-up (quant/kernel_choice.h), capped by this CPU.
bool cpu_has_avx2_fma() { return simd_level() >= SimdLevel::Avx2; }

bool cpu_has_avx512_vnni() { return simd_level() >= SimdLevel::Avx512; }

}  // namespace quant

const char* quant_isa_name(QuantIsa isa) { return isa == QuantIsa::Ref ? "ref" : "avx2"; }

bool quant_isa_available(QuantIsa isa) { return isa == QuantIsa::Ref || quant::cpu_has_avx2_fma(); }

DequantizeFn find_dequantize(GgmlType t, QuantIsa isa) {
  if (!quant_isa_available(isa)) return nullptr;
  return isa == QuantIsa::Ref ? quant::dequantize_ref_fn(t) : quant::dequantize_avx2_fn(t);
}
QuantizeFn find_quantize(GgmlType t, QuantIsa isa) {
  if (!quant_isa_available(isa)) return nullptr;
  return isa == QuantIsa::Ref ? quant::quantize_ref_fn(t) : quant::quantize_avx2_fn(t);
}
VecDotFn find_vec_dot(GgmlType t, QuantIsa isa) {
  if (!quant_isa_available(isa)) return nullptr;
  if (isa == QuantIsa::Ref) return quant::vec_dot_ref_fn(t);
  // The avx512 family's own row dot products where it has them (the trellis types), bit-identical
  // to the AVX2 ones; QuantIsa::Avx2 names the family's SIMD kernels.
  if (quant::cpu_has_avx512_vnni())
    if (VecDotFn f = quant::vec_dot_kt_avx512_fn(t)) return f;
  return quant::vec_dot_avx2_fn(t);
}

namespace {

// Best kernel per type id, resolved on first use. Type ids are < kMaxTypeId: mla.cpp's stop at 158,
// and ik_llama.cpp's row-interleaved ids (up to 399) are converted to their base type at load.
constexpr uint32_t kMaxTypeId = 512;

template <typename Fn, Fn (*Find)(GgmlType, QuantIsa)>
Fn best(GgmlType t) {
  struct Table {
    Fn fns[kMaxTypeId] = {};
    Table() {
      int count = 0;
      const GgmlType* all = ggml_all_types(&count);
      for (int i = 0; i < count; ++i) {
        const auto id = static_cast<uint32_t>(all[i]);
        if (id >= kMaxTypeId) continue;
        Fn f = Find(all[i], QuantIsa::Avx2);
        fns[id] = f ? f : Find(all[i], QuantIsa::Ref);
      }
    }
  };
  static const Table table;
  const auto id = static_cast<uint32_t>(t);
  Fn f = id < kMaxTypeId ? table.fns[id] : nullptr;
  if (!f) fail_unsupported(t);
  return f;
}

}  // namespace

DequantizeFn dequantize_fn(GgmlType t) { return best<DequantizeFn, find_dequantize>(t); }
QuantizeFn quantize_fn(GgmlType t) { return best<QuantizeFn, find_quantize>(t); }
VecDotFn vec_dot_fn(GgmlType t) { return best<VecDotFn, find_vec_dot>(t); }

VecDot4Fn vec_dot4_fn(GgmlType t) {
  // Only alongside the AVX2 single-row kernel it mirrors.
  if (!quant::cpu_has_avx2_fma() || find_vec_dot(t, QuantIsa::Avx2) == nullptr) return nullptr;
  return quant::vec_dot4_avx2_fn(t);
}

bool can_dequantize(GgmlType t) { return quant::dequantize_ref_fn(t) != nullptr; }
bool can_quantize(GgmlType t) { return quant::quantize_ref_fn(t) != nullptr; }

void dequantize_row_ref(GgmlType t, const void* src, float* dst, int64_t n) {
  DequantizeFn f = quant::dequantize_ref_fn(t);
  if (!f) fail_unsupported(t);
  check_row(t, n);
  f(src, dst, n);
}

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
  DequantizeFn f = dequantize_fn(t);
  check_row(t, n);
  f(src, dst, n);
}

void quantize_row(GgmlType t, const float* src, void* dst, int64_t n) {
  QuantizeFn f = quantize_fn(t);
  check_row(t, n);
  f(src, dst, n);
}

GgmlType vec_dot_type(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
      return t;
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q8_0:
    case GgmlType::IQ4_NL:
    case GgmlType::MXFP4:
    case GgmlType::NVFP4:
    case GgmlType::Q6_0:
      return GgmlType::Q8_0;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::Q8_K:
    case GgmlType::IQ4_XS:
    case GgmlType::IQ1_S:
    case GgmlType::IQ1_M:
    case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS:
    case GgmlType::IQ2_S:
    case GgmlType::IQ3_XXS:
    case GgmlType::IQ3_S:
    case GgmlType::IQ1_KT:
    case GgmlType::IQ2_KT:
    case GgmlType::IQ3_KT:
    case GgmlType::IQ4_KT:
    case GgmlType::IQ2_K:
    case GgmlType::IQ3_K:
    case GgmlType::IQ4_K:
    case GgmlType::IQ5_K:
    case GgmlType::IQ6_K:
    case GgmlType::IQ4_KS:
    case GgmlType::IQ2_KS:
    case GgmlType::IQ4_KSS:
    case GgmlType::IQ5_KS:
    case GgmlType::IQ3_KS:
    case GgmlType::IQ2_KL:
      return GgmlType::Q8_K;
    default:
      fail_unsupported(t);
  }
}

float vec_dot_ref(GgmlType t, int64_t n, const void* w, const void* a) {
  VecDotFn f = quant::vec_dot_ref_fn(t);
  if (!f) fail_unsupported(t);
  check_row(t, n);
  return f(n, w, a);
}

float vec_dot(GgmlType t, int64_t n, const void* w, const void* a) {
  VecDotFn f = vec_dot_fn(t);
  check_row(t, n);
  return f(n, w, a);
}

}  // namespace mla
