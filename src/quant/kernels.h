#pragma once
// Internal: the per-type kernel tables behind quant.h. Each kernel file (dequant_ref.cpp,
// quantize.cpp, dot_ref.cpp, *_avx2.cpp) exports one lookup from type to function; dispatch.cpp
// chooses among them once per process.
#include "quant/packed.h"
#include "quant/quant.h"

// Files whose results must match ggml / gguf-py bit for bit put this first: GCC contracts
// a*b+c into an FMA (one rounding instead of two) even in ISO C++ mode, which changes results.
#if defined(__clang__)
#define MLA_NO_FP_CONTRACT _Pragma("clang fp contract(off)")
#elif defined(__GNUC__)
#define MLA_NO_FP_CONTRACT _Pragma("GCC optimize(\"fp-contract=off\")")
#else
#define MLA_NO_FP_CONTRACT
#endif

namespace mla::quant {

// Scalar references; nullptr where the type has no such kernel.
DequantizeFn dequantize_ref_fn(GgmlType t);
QuantizeFn quantize_ref_fn(GgmlType t);
VecDotFn vec_dot_ref_fn(GgmlType t);

// AVX2+FMA(+F16C) kernels; nullptr where none exists. Only call them when
// cpu_has_avx2_fma() is true (they are compiled with -mavx2 -mfma -mf16c).
DequantizeFn dequantize_avx2_fn(GgmlType t);
QuantizeFn quantize_avx2_fn(GgmlType t);
VecDotFn vec_dot_avx2_fn(GgmlType t);
// Four-row twins of some vec_dot_avx2_fn kernels (same arithmetic per row); nullptr elsewhere.
VecDot4Fn vec_dot4_avx2_fn(GgmlType t);

bool cpu_has_avx2_fma();
// AVX-512 F, BW, VL and VNNI (the packed GEMM kernels of packed_avx512.cpp); false where the
// avx2 or scalar family is chosen (quant/kernel_choice.h: --simd avx2|scalar).
bool cpu_has_avx512_vnni();

// Offsets inside one packed block (Q8_0x16) or super-block (Q4_Kx16, Q6_Kx16) of a 16-row group; the
// layouts are described in packed.h.
inline constexpr int64_t kQ8x16Quants = 32;
inline constexpr int64_t kQ8x16Bytes = 32 + 8 * 64;
inline constexpr int64_t kQ4Kx16Dmin = 32;
inline constexpr int64_t kQ4Kx16Scales = 64;
inline constexpr int64_t kQ4Kx16Mins = 64 + 128;
inline constexpr int64_t kQ4Kx16Quants = 64 + 128 + 128;
inline constexpr int64_t kQ4Kx16Bytes = kQ4Kx16Quants + 4 * 8 * 64;
// Q5_Kx16: the Q4_Kx16 super-block, then the fifth-bit plane (8 entries x 64 bytes).
inline constexpr int64_t kQ5Kx16High = kQ4Kx16Bytes;
inline constexpr int64_t kQ5Kx16Bytes = kQ5Kx16High + 8 * 64;
// Q2_Kx16: fp16 d[16] | fp16 dmin[16] | the file's scale bytes (scale low nibble, min high) in
// pairs, [pair p][row r][2] = sub-blocks 2p, 2p+1 | 2-bit plane, 16 entries x 64 bytes: entry e,
// row r, byte i, bits 2f..2f+1 = level of column 4(e + 16f) + i.
inline constexpr int64_t kQ2Kx16Dmin = 32;
inline constexpr int64_t kQ2Kx16Scales = 64;
inline constexpr int64_t kQ2Kx16Quants = 64 + 256;
inline constexpr int64_t kQ2Kx16Bytes = kQ2Kx16Quants + 16 * 64;
// Q3_Kx16: fp16 d[16] | int8 (scale - 32)[16 sub-blocks][16 rows] | the 2-bit plane as Q2_Kx16's
// | high-bit plane, 8 entries x 64 bytes: entry h, row r, byte i, bit f = high bit of column
// 4(h + 8f) + i (set: level = low bits, clear: low bits - 4).
inline constexpr int64_t kQ3Kx16Scales = 32;
inline constexpr int64_t kQ3Kx16Quants = 32 + 256;
inline constexpr int64_t kQ3Kx16High = kQ3Kx16Quants + 16 * 64;
inline constexpr int64_t kQ3Kx16Bytes = kQ3Kx16High + 8 * 64;
inline constexpr int64_t kQ6Kx16Scales = 32;
inline constexpr int64_t kQ6Kx16Nibbles = 32 + 256;
inline constexpr int64_t kQ6Kx16Bits = 32 + 256 + 32 * 64;
inline constexpr int64_t kQ6Kx16Bytes = kQ6Kx16Bits + 16 * 64;
// Q8_K activation extras per super-block: 8 int16 sums of 32 quants (Q4_K mins), then after all
// super-blocks' pairs, 16 int32 values -32 x the sum of 16 quants (Q6_K's level offset), then
// 16 int32 values -128 x the same sums (the unsigned operand's offset of the table k-quants).
inline constexpr int64_t kQ8KExtraPairs = 16;
inline constexpr int64_t kQ8KExtraNeg32 = 64;
inline constexpr int64_t kQ8KExtraNeg128 = 64;
// The AVX-512 packed GEMM kernels; nullptr for a type without a packed layout. Call only when
// cpu_has_avx512_vnni().
PackedGemmFn packed_gemm_avx512_fn(GgmlType t);
// The AVX2 packed GEMM kernels over the same layouts (packed_avx2.cpp, packed_nibble_avx2.cpp,
// packed_iq_avx2.cpp), bit-identical to the same twins; nullptr for a type without a packed
// layout. Call only when cpu_has_avx2_fma().
PackedGemmFn packed_gemm_avx2_fn(GgmlType t);
PackedGemmFn packed_gemm_nibble_avx2_fn(GgmlType t);
PackedGemmFn packed_gemm_iq_avx2_fn(GgmlType t);

// The grid i-quants' packed groups (IQ2_*, IQ3_*, IQ1_S, IQ1_M; packed_iq.cpp, packed_iq_avx512.cpp; layout in
// packed_iq.h): 0 bytes / nullptr for any other type.
int64_t packed_iq_group_bytes(GgmlType t, int64_t n_cols);
void pack_iq_rows(GgmlType t, const uint8_t* src, int64_t row_bytes, int64_t n_cols, uint8_t* dst);
PackedGemmFn packed_gemm_iq_ref_fn(GgmlType t);
PackedGemmFn packed_gemm_iq_avx512_fn(GgmlType t);
// The same for the 4-bit-index types Q4_0, Q5_0, IQ4_NL, MXFP4 and IQ4_XS (packed_nibble.cpp,
// packed_nibble_avx512.cpp; layouts in packed_nibble.h).
int64_t packed_nibble_group_bytes(GgmlType t, int64_t n_cols);
void pack_nibble_rows(GgmlType t, const uint8_t* src, int64_t row_bytes, int64_t n_cols, uint8_t* dst);
PackedGemmFn packed_gemm_nibble_ref_fn(GgmlType t);
PackedGemmFn packed_gemm_nibble_avx512_fn(GgmlType t);

// Q2_K / Q3_K AVX2 dot products (dot_q23k_avx2.cpp), exported for vec_dot_avx2_fn's table.
float dot_q2_k_avx2(int64_t n, const void* w, const void* a);
float dot_q3_k_avx2(int64_t n, const void* w, const void* a);

// AVX2 dot products of the lattice i-quants (dot_iq_avx2.cpp); nullptr for any other type.
VecDotFn vec_dot_iq_avx2_fn(GgmlType t);

// The lattice i-quants (iquants.cpp): IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S;
// nullptr for any other type.
DequantizeFn dequantize_iq_ref_fn(GgmlType t);
VecDotFn vec_dot_iq_ref_fn(GgmlType t);

// ik_llama.cpp's trellis types IQ1_KT, IQ2_KT, IQ3_KT, IQ4_KT (trellis.cpp, trellis_avx2.cpp):
// rows carry their float scale first; nullptr for any other type.
DequantizeFn dequantize_kt_ref_fn(GgmlType t);
VecDotFn vec_dot_kt_ref_fn(GgmlType t);
VecDotFn vec_dot_kt_avx2_fn(GgmlType t);
// trellis_avx512.cpp: only call when cpu_has_avx512_vnni(); bit-identical to the AVX2 kernels.
VecDotFn vec_dot_kt_avx512_fn(GgmlType t);

// K-quant quantizers (quantize_k.cpp), exported for quantize.cpp's table.
void quantize_q2_k_ref(const float* x, void* dst, int64_t n);
void quantize_q3_k_ref(const float* x, void* dst, int64_t n);
void quantize_q4_k_ref(const float* x, void* dst, int64_t n);
void quantize_q5_k_ref(const float* x, void* dst, int64_t n);
void quantize_q6_k_ref(const float* x, void* dst, int64_t n);
// IQ4_NL, IQ4_XS and MXFP4 (quantize_iq4.cpp) and the lattice i-quants (quantize_iq.cpp);
// nullptr for any other type.
QuantizeFn quantize_iq4_ref_fn(GgmlType t);
QuantizeFn quantize_iq_ref_fn(GgmlType t);

}  // namespace mla::quant
