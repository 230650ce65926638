#pragma once
// Internal: the kernel tables of ik_llama.cpp's non-trellis quants (iqk_ref.cpp, iqk_avx2.cpp,
// quantize_iqk.cpp), consulted by the per-type lookups of kernels.h; nullptr for any other type.
#include "quant/quant.h"

namespace mla::quant {

DequantizeFn dequantize_iqk_ref_fn(GgmlType t);
VecDotFn vec_dot_iqk_ref_fn(GgmlType t);
// Call only when cpu_has_avx2_fma().
VecDotFn vec_dot_iqk_avx2_fn(GgmlType t);
QuantizeFn quantize_iqk_ref_fn(GgmlType t);

}  // namespace mla::quant
