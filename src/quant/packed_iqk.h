#pragma once
// Internal: the packed 16-row layouts of ik_llama.cpp's table k-quants, shared by the packer and
// scalar twin (packed_iqk.cpp) and the AVX-512 and AVX2 kernels (packed_iqk_avx512.cpp,
// packed_iqk_avx2.cpp): IQ4_K, IQ5_K, IQ6_K (fp16 d per super-block, a scale per 16 columns) and
// IQ4_KS, IQ5_KS, IQ4_KSS (an fp32 scale per row, a scale byte per 32 columns) first; then the 2- and 3-bit
// IQ2_K, IQ3_K, IQ2_KS, IQ3_KS and the pair-indexed IQ2_KL, each described below.
//
// A value is d * scale[group] * level, level = table[index] + shift * extra[group]: each type's
// second table is its first plus a constant (IQ4: kIQ4KValues + 4, IQ5: kIQ5NLValues + 2), so the
// group's extra bit becomes one add on the operand bytes; IQ6_K (kIQ6NLValues + 1: the table its
// dot products use; ik_llama.cpp dequantizes it by a cubic within half a level of it) is laid out
// as IQ5_K. The index is 4 bits (IQ4), 4 bits plus a fifth (IQ5) or two more (IQ6) from their own
// planes. Levels lie in -127..123, so level + 128 is the unsigned
// vpdpbusd operand; each group's sum starts from -128 x its activation sum (Q8_K's bsums).
//
// Group layout (16 rows, n_cols columns):
//   IQ4_KS, IQ5_KS only: fp32 d[16] (the rows' headers)
//   per 256-column super-block:
//     IQ4_K, IQ5_K: fp16 d[16] | int8 scale[16 groups][16] | u16 extra[16 groups], bit r: row r
//     IQ4_KS, IQ5_KS: u8 scales[8 groups][16], the file's bytes (bit 0 extra, (s & 254) - 127 scale)
//     | 8 sub-blocks x 4 k-groups x 64 bytes: sub-block s, k-group g, row r: 4 bytes, byte i: the
//       index of column 32s+4g+i (low nibble) and of 32s+16+4g+i (high nibble)
//     | IQ5 only: 8 x 64 bytes: sub-block s, row r: 4 bytes, byte i: bit g = fifth index bit of
//       column 32s+4g+i, bit 4+g that of 32s+16+4g+i
//     | IQ6 only: 8 x 2 x 64 bytes: sub-block s, entry h, row r, byte i: bits 2g..2g+1 = index bits
//       4-5 of column 32s+16h+4g+i
// The 16 rows take exactly their file bytes (IQ4_KS, IQ5_KS, IQ6_K) or 64 bytes more per super-block
// (IQ4_K, IQ5_K: the unpacked scales and extra bits); IQ4_KSS, packed as IQ4_KS, 128 more.
// Every super-block is a whole number of cache lines.
#include <cstdint>

#include "quant/iqk_blocks.h"
#include "quant/packed.h"
#include "util/ggml_type.h"

namespace mla::quant {

struct IqkPackedSpec {
  int n_groups = 0;               // scale groups per super-block: 16 (fp16 d per block) or 8 (fp32 d per row)
  int shift = 0;                  // the second table minus the first
  int high_bits = 0;              // index bits above the nibble: 0 (IQ4), 1 (IQ5) or 2 (IQ6)
  const int8_t* table = nullptr;  // 16, 32 or 64 levels (index bit 4 set -> the next 16, bit 5 -> 32 on)

  constexpr bool row_scaled() const { return n_groups == 8; }
  constexpr int64_t header_bytes() const { return row_scaled() ? 64 : 0; }
  constexpr int64_t scale_offset() const { return row_scaled() ? 0 : 32; }
  constexpr int64_t extra_offset() const { return 32 + 256; }  // 16-group types only
  constexpr int64_t quants_offset() const { return row_scaled() ? 128 : 32 + 256 + 32; }
  constexpr int64_t bits_offset() const { return quants_offset() + 8 * 256; }
  constexpr int64_t bytes() const { return bits_offset() + 8 * 64 * high_bits; }
};

// The spec of t; n_groups == 0 when t has no such layout.
constexpr IqkPackedSpec iqk_packed_spec(GgmlType t) {
  switch (t) {
    case GgmlType::IQ4_K:
      return {16, 4, 0, kIQ4KValues};
    case GgmlType::IQ5_K:
      return {16, 2, 1, kIQ5NLValues};
    case GgmlType::IQ6_K:
      return {16, 1, 2, kIQ6NLValues};
    case GgmlType::IQ4_KS:
      return {8, 4, 0, kIQ4KValues};
    case GgmlType::IQ5_KS:
      return {8, 2, 1, kIQ5NLValues};
    case GgmlType::IQ4_KSS:  // packed as IQ4_KS: its Gray-coded nibble words decoded, its scale bits as bytes
      return {8, 4, 0, kIQ4KValues};
    default:
      return {};
  }
}

// IQ2_K, IQ3_K (fp16 d per super-block, scales per 16 columns) and IQ2_KS, IQ3_KS (an fp16 scale
// per row, scales per 32 columns): 2-bit indices (IQ3: and a third bit) into 4 (8) levels, the
// group's extra bit adding 5 (IQ2: kIQ2NLValues) or 4 (IQ3: kIQ3NLValues) as for IQ4. Planes as
// Q3_Kx16's (packed.h), so one 64-byte entry holds 4 columns of the 16 rows four times over:
//   IQ2_KS, IQ3_KS only: fp16 d[16] (the rows' headers), 32 bytes of padding
//   per 256-column super-block:
//     IQ2_K, IQ3_K: fp16 d[16] | int8 scale[16 groups][16] | u16 extra[16 groups], bit r: row r
//     IQ2_KS, IQ3_KS: int8 (2 scale + extra)[8 groups][16]
//     | 16 x 64 bytes: entry p, row r, byte i: bits 2q..2q+1 = index bits 0-1 of column 64q+4p+i
//     | IQ3 only: 8 x 64 bytes: entry p % 8, row r, byte i: bit 2q + p/8 = index bit 2 of that column
// Levels lie in -63..55: level + 128 feeds vpdpbusd as above. Super-blocks are whole cache lines;
// the 16 rows take their file bytes plus 128 (IQ2_K), 96 (IQ3_K) or 32 (IQ2_KS, IQ3_KS) per
// super-block (scales as bytes) and, row-scaled, 32 per group.
struct IqkLowSpec {
  int n_groups = 0;  // scale groups per super-block: 16 (fp16 d per block) or 8 (fp16 d per row)
  int shift = 0;     // the second table minus the first
  bool third_bit = false;
  const int8_t* table = nullptr;  // 4 levels (IQ2) or 8 (IQ3)

  constexpr bool row_scaled() const { return n_groups == 8; }
  constexpr int64_t header_bytes() const { return row_scaled() ? 64 : 0; }
  constexpr int64_t scale_offset() const { return row_scaled() ? 0 : 32; }
  constexpr int64_t extra_offset() const { return 32 + 256; }  // 16-group types only
  constexpr int64_t quants_offset() const { return row_scaled() ? 128 : 32 + 256 + 32; }
  constexpr int64_t bits_offset() const { return quants_offset() + 16 * 64; }
  constexpr int64_t bytes() const { return bits_offset() + (third_bit ? 8 * 64 : 0); }
};

constexpr IqkLowSpec iqk_low_spec(GgmlType t) {
  switch (t) {
    case GgmlType::IQ2_K:
      return {16, 5, false, kIQ2NLValues};
    case GgmlType::IQ3_K:
      return {16, 4, true, kIQ3NLValues};
    case GgmlType::IQ2_KS:
      return {8, 5, false, kIQ2NLValues};
    case GgmlType::IQ3_KS:
      return {8, 4, true, kIQ3NLValues};
    default:
      return {};
  }
}

// IQ2_KL keeps its 5-bit indices of pairs of columns: a level pair is one of 32
// (kIQ2KLPairs), looked up per 16-bit word by vpermw. Group layout (16 rows):
//   fp16 d[16] (the rows' headers), 32 bytes of padding
//   per 256-column super-block:
//     int8 scale[8 sub-blocks][16]
//     | 16 x 64 bytes: entry 2s+h (sub-block s, half h), 16-bit word 2r+j (row r): nibble k = the
//       4 low index bits of pair 8h+2k+j of the sub-block (columns 32s+16h+4k+2j, +1)
//     | 4 x 64 bytes: entry s/2, word 2r+j: bit 8(s%2)+4h+k = the fifth index bit of that pair
// so nibble k of an entry, as 32 words, is the operand of columns 32s+16h+4k..+3 of all 16 rows.
// The 16 rows take their file bytes plus 32 per super-block (the 6-bit scales as bytes) and 32
// per group (padding to a cache line).
inline constexpr int64_t kIQ2KLx16Head = 64;
inline constexpr int64_t kIQ2KLx16Nibbles = 128;
inline constexpr int64_t kIQ2KLx16Fifth = 128 + 16 * 64;
inline constexpr int64_t kIQ2KLx16Bytes = kIQ2KLx16Fifth + 4 * 64;

// True when t has one of this file's layouts.
constexpr bool iqk_packed(GgmlType t) {
  return iqk_packed_spec(t).n_groups != 0 || iqk_low_spec(t).n_groups != 0 || t == GgmlType::IQ2_KL;
}

// The packer, group size and kernels of these layouts (packed_iqk.cpp, packed_iqk_avx512.cpp,
// packed_iqk_avx2.cpp): 0 bytes / nullptr for any other type.
int64_t packed_iqk_group_bytes(GgmlType t, int64_t n_cols);
void pack_iqk_rows(GgmlType t, const uint8_t* src, int64_t row_bytes, int64_t n_cols, uint8_t* dst);
PackedGemmFn packed_gemm_iqk_ref_fn(GgmlType t);
PackedGemmFn packed_gemm_iqk_avx512_fn(GgmlType t);
PackedGemmFn packed_gemm_iqk_avx2_fn(GgmlType t);

}  // namespace mla::quant
