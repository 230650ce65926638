#pragma once
// Tensor formats: dequantize, quantize and row dot products for ggml block types.
//
// Every function works on whole rows: n is the element count and must be a multiple of the
// type's block size. `_ref` functions are the portable scalar references; the unsuffixed ones
// pick the fastest kernel for this CPU once (see dispatch) and must agree with the reference
// within the tolerance stated in tests/quant.
//
// Dequantization (reference and SIMD) is bit-exact with ggml's dequantize_row_* and gguf-py's
// gguf.quants.dequantize. quantize_row for F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1 and Q8_K is
// bit-exact with ggml's quantize_row_*_ref (and gguf-py); the K-quants, IQ4_NL, IQ4_XS and MXFP4
// follow the algorithms llama-quantize runs without an importance matrix and give its bytes
// (tests/py/test_quantize_vs_llama.py); the lattice i-quants (IQ1_*, IQ2_*, IQ3_*) use mla.cpp's
// own grid search (quantize_iq.cpp), checked for error against llama.cpp's.
#include <cstddef>
#include <cstdint>

#include "util/ggml_type.h"

namespace mla {

// True when dequantize_row() supports t (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K,
// Q8_K, IQ4_NL, IQ4_XS, MXFP4, NVFP4, the lattice i-quants IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S,
// IQ3_XXS, IQ3_S, and ik_llama.cpp's trellis types IQ1_KT..IQ4_KT).
bool can_dequantize(GgmlType t);
// True when quantize_row() supports t: every type can_dequantize() accepts except Q4_1, NVFP4 and
// the trellis types.
bool can_quantize(GgmlType t);

// Throws mla::Error "tensor type IQ2_XXS is not supported yet" for an unsupported type, and
// mla::Error when n is not a multiple of the block size.
void dequantize_row_ref(GgmlType t, const void* src, float* dst, int64_t n);
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);
// imatrix-free quantization from F32; dst holds ggml_row_bytes(t, n) bytes. Same errors.
void quantize_row(GgmlType t, const float* src, void* dst, int64_t n);

// The activation format a weight type's dot product consumes (llama.cpp's vec_dot_type):
// Q8_0 for the 32-element block types and NVFP4 (also Q4_1/Q5_1, whose ggml pairing is Q8_1: the
// activation sum Q8_1 carries is recomputed from the Q8_0 quants), Q8_K for K-quants, IQ4_XS, the
// lattice i-quants and the trellis types,
// F32 for F32, F16 for F16, BF16 for BF16. Throws for an unsupported type.
GgmlType vec_dot_type(GgmlType weight_type);
// dot(w, a) over n elements: w is one row of weight_type, a one row already quantized to
// vec_dot_type(weight_type) by quantize_row (so Q8 quants lie in [-127, 127], which the SIMD
// kernels rely on). Throws for an unsupported type; n must be a multiple of the block size.
float vec_dot_ref(GgmlType weight_type, int64_t n, const void* w, const void* a);
float vec_dot(GgmlType weight_type, int64_t n, const void* w, const void* a);

// Kernel pointers for hot loops: look up once, call per row. n must be a multiple of the block
// size (not checked).
using DequantizeFn = void (*)(const void* src, float* dst, int64_t n);
using QuantizeFn = void (*)(const float* src, void* dst, int64_t n);
using VecDotFn = float (*)(int64_t n, const void* w, const void* a);
// Four activation rows at once: out[t] = w · (a + t * a_stride) for t < 4, each bit-identical to
// what vec_dot_fn(weight_type) returns for that row (one kernel body serves both), so callers may
// mix the two freely without changing any result.
using VecDot4Fn = void (*)(int64_t n, const void* w, const void* a, int64_t a_stride, float* out);

enum class QuantIsa { Ref, Avx2 };
const char* quant_isa_name(QuantIsa isa);
// Whether this CPU can run kernels of `isa` (Ref: always; Avx2: AVX2 and FMA and F16C).
bool quant_isa_available(QuantIsa isa);
// The kernel of exactly that ISA, or nullptr when there is none (or the CPU lacks the ISA).
DequantizeFn find_dequantize(GgmlType t, QuantIsa isa);
QuantizeFn find_quantize(GgmlType t, QuantIsa isa);
VecDotFn find_vec_dot(GgmlType weight_type, QuantIsa isa);
// The fastest kernel available on this CPU; throws "tensor type X is not supported yet".
DequantizeFn dequantize_fn(GgmlType t);
QuantizeFn quantize_fn(GgmlType t);
VecDotFn vec_dot_fn(GgmlType weight_type);
// The four-row twin of vec_dot_fn(weight_type), or nullptr where there is none.
VecDot4Fn vec_dot4_fn(GgmlType weight_type);

// fp16 / bf16 scalar conversions (IEEE round-to-nearest-even, as ggml). fp16→fp32 keeps NaN
// payloads; fp32→fp16/bf16 returns a quiet NaN for a NaN.
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);

}  // namespace mla
