#pragma once
// Weight rows repacked for register-tiled integer GEMM (AVX-512 VNNI, or AVX2): 16 consecutive
// rows of a Q8_0, Q4_K or Q6_K matrix are interleaved into one *group* so that one 64-byte load
// holds 4 consecutive weights of each of the 16 rows — exactly the operand of one vpdpbusd, whose
// 16 int32 lanes are then the 16 rows' partial sums (AVX2 reads it as two 8-row halves). A tile of up to
// kPackedMaxTokens activation rows shares every weight load (prefill); one token is the decode GEMV over the same
// layout.
//
// The float arithmetic is fixed per (row, token): integer block sums are exact, and the float
// accumulation runs over the blocks in order, one accumulator, the same instructions whatever
// the tile's token count — so a row's result does not depend on the batch (batch invariance).
// packed_gemm_ref is the scalar twin and gives the same bits.
//
// Group layouts (16 rows, n_cols elements each):
//   Q8_0x16, per 32-element block b:  fp16 d[16] | 8 x 64 bytes: k-group g (columns 4g..4g+3)
//            of row r at bytes 4r..4r+3, stored as q + 128 (unsigned)            = 544 bytes
//   Q4_Kx16, per 256-element super-block: fp16 d[16] | fp16 dmin[16] | u8 scale[8][16] |
//            u8 min pairs [4][16][2] (min 2j, 2j+1 of row r) | 4 chunks x 8 k-groups x 64 bytes:
//            chunk c, k-group g, row r: 4 bytes whose low nibbles are columns 64c+4g..+3 and
//            high nibbles columns 64c+32+4g..+3                                  = 2368 bytes
//   Q6_Kx16, per 256-element super-block: fp16 d[16] | int8 scale[16][16] | 32 nibble entries
//            x 64 bytes: entry p, row r: 4 bytes whose low nibbles are the low 4 bits of the
//            6-bit levels of columns 4p..4p+3, high nibbles those of 128+4p.. | 16 bit entries x
//            64 bytes: entry h, row r: 4 bytes holding the top 2 bits of columns 4h.. (bits 0-1),
//            64+4h.. (2-3), 128+4h.. (4-5), 192+4h.. (6-7)                     = 3360 bytes
//
// Activations: one row as quantize_row writes it for vec_dot_type (Q8_0 or Q8_K), followed by
// packed_act_extra_bytes of per-block sums that the kernels need (see packed_act_extra).
#include <cstdint>

#include "util/ggml_type.h"

namespace mla {

inline constexpr int kPackedRows = 16;       // weight rows per group
inline constexpr int kPackedMaxTokens = 24;  // activation rows per kernel call

// True when t has a packed layout (see packed_gemm_ref_fn), whatever the CPU.
bool packed_layout_exists(GgmlType t);
// Bytes of one group of 16 rows of n_cols elements (n_cols a multiple of the block size).
int64_t packed_group_bytes(GgmlType t, int64_t n_cols);
// Interleaves 16 rows (row r at src + r * row_bytes, ggml layout) into one group at dst.
void pack_rows(GgmlType t, const uint8_t* src, int64_t row_bytes, int64_t n_cols, uint8_t* dst);

// Bytes appended to each activation row of type act_type (a vec_dot_type) for the packed
// kernels — 0 for types no packed layout consumes — and how they are computed from the quantized
// row (Q8_0: per block -128 x the sum of its quants, int32; Q8_K: per super-block the 8 sums of
// 32 quants, int16, then for all super-blocks -32 x each sum of 16 quants, int32, then for all
// super-blocks -128 x each sum of 16 quants, int32). Keyed by the activation type so that
// weights of different types may share one quantized activation.
int64_t packed_act_extra_bytes(GgmlType act_type, int64_t n_cols);
void packed_act_extra(GgmlType act_type, const void* act_row, int64_t n_cols, void* extra);

// out[t * 16 + r] = dot(row r of the group, activation row t) for t < n_tok <= kPackedMaxTokens;
// activation row t starts at act + t * act_stride (quantized row, then its extra).
using PackedGemmFn = void (*)(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, int n_tok,
                              float* out);

// The scalar reference (any CPU); nullptr when t has no packed layout.
PackedGemmFn packed_gemm_ref_fn(GgmlType t);
// The SIMD kernel this process runs, or nullptr: no layout, repacking off (--no-repack), or the
// scalar family (no AVX2+FMA+F16C, or --simd scalar: it keeps row dot products). The AVX-512
// F/BW/VL/VNNI family where the CPU has it and it is chosen (quant/kernel_choice.h), else the AVX2
// one. Callers pack weights only when this is non-null.
PackedGemmFn packed_gemm_fn(GgmlType t);
// The family packed_gemm_fn chooses from: "avx512", "avx2", or "none" (then it is always nullptr).
const char* packed_gemm_family();

}  // namespace mla
