#pragma once
// Internal: the packed 16-row layouts of the 4-bit-index types with 32-column blocks (Q4_0,
// Q5_0, Q6_0, IQ4_NL, MXFP4) and of IQ4_XS, shared by the packer and scalar twin (packed_nibble.cpp)
// and the AVX-512 kernel (packed_nibble_avx512.cpp). They keep the rows' nibbles as the file
// stores them: in a block of 32 columns, byte j holds column j (low nibble) and j + 16 (high).
//
// Per 32-column block of a 16-row group (Q4_0, Q5_0, Q6_0, IQ4_NL, MXFP4):
//   scale[16] x 2 bytes   fp16 d (MXFP4: the E8M0 exponent byte, then 0)
//   | 4 k-groups x 64 bytes: k-group g, row r: the row's bytes 4g..4g+3 (columns 4g+i low,
//     16+4g+i high)
//   | Q5_0 only: 64 bytes, row r: 4 bytes, byte i: bit g = fifth bit of column 4g+i, bit 4+g
//     = fifth bit of column 16+4g+i
//   | Q6_0 only: 2 x 64 bytes, entry h, row r: 4 bytes, byte i: bits 2g..2g+1 = the top two
//     bits of column 16h+4g+i
// Per 256-column super-block (IQ4_XS): fp16 d[16] | int8 (ls - 32)[8 sub-blocks][16] | 8 x the
// 4 k-groups above, one per 32-column sub-block.
//
// The levels: Q4_0 nibble - 8, Q5_0 (nibble | fifth << 4) - 16, Q6_0 (nibble | top << 4) - 32, IQ4_NL / IQ4_XS
// kIQ4NLValues, MXFP4 kMXFP4Values (doubled; the scale is halved). The kernel feeds vpdpbusd level + offset (unsigned)
// and starts each block's sum at -offset x the activation sum, which it takes from the Q8_0 extra (-128 x sum) or
// Q8_K's bsums.
#include <cstdint>

#include "quant/iqk_blocks.h"
#include "util/ggml_blocks.h"
#include "util/ggml_type.h"

namespace mla::quant {

struct NibblePackedSpec {
  int block_cols = 0;             // 32, or 256 for IQ4_XS
  int offset = 0;                 // level + offset is the unsigned vpdpbusd operand: 8, 16, 32 or 128
  int high_bits = 0;              // bits above the nibble: 1 (Q5_0) or 2 (Q6_0), in planes of 64 bytes per bit
  bool lookup = false;            // the level is table[nibble]; else (nibble | high bits << 4) - offset
  const int8_t* table = nullptr;  // with lookup: nibble -> level

  constexpr int64_t quants_offset() const { return block_cols == 32 ? 32 : 32 + 128; }
  constexpr int64_t bits_offset() const { return quants_offset() + 256 * (block_cols / 32); }
  constexpr int64_t bytes() const { return bits_offset() + 64 * high_bits; }
};

// The spec of t; block_cols == 0 when t has no such layout.
constexpr NibblePackedSpec nibble_packed_spec(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0:
      return {32, 8, 0, false, nullptr};
    case GgmlType::Q5_0:
      return {32, 16, 1, false, nullptr};
    case GgmlType::Q6_0:
      return {32, 32, 2, false, nullptr};
    case GgmlType::IQ4_NL:
      return {32, 128, 0, true, kIQ4NLValues};
    case GgmlType::MXFP4:
      return {32, 128, 0, true, kMXFP4Values};
    case GgmlType::IQ4_XS:
      return {256, 128, 0, true, kIQ4NLValues};
    default:
      return {};
  }
}

}  // namespace mla::quant
