#pragma once
// Internal: the packed 16-row layout of the grid i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
// and the grid-and-shift IQ1_S, IQ1_M), shared by the packer and scalar twin (packed_iq.cpp) and the AVX-512 kernel
// (packed_iq_avx512.cpp). The layout keeps the grid indices, so a group stays about the size of
// its 16 rows; the kernel fetches grid points with a gather.
//
// A value is d * ls / den * grid[idx][j] * sign, with ls = 2s+1 per 16 or 32 columns. Per
// 256-column super-block of a 16-row group:
//   fp16 d[16]
//   | u8 ls[n_scales][16]                      (row r's ls of scale group s at 16s + r)
//   | indices[32 groups of 8 columns][n_idx][16 rows], idx_bytes each (little-endian)
//   | signs, 512 bytes, by the point size:
//       8-byte points (IQ2): u8 sign[32 groups][16 rows], bit j: column 8g + j of row r is negative
//       4-byte points (IQ3): u64 mask[32 groups][2 halves], bit 4r + j: column 8g + 4h + j of row r
//     or, for IQ1 (no signs: its points are -1/0/+1, each group shifted by +-1/8), 64 bytes:
//       u8 up[32 groups][2 halves], bit q: row 8h + q's shift is +1/8 (clear: -1/8)
// IQ1 is read as integers 8 * grid + shift (-9..9) over a denominator of 8, so its sums stay exact.
// A grid point covers 8 columns (IQ2: one index per group; the kernel gathers the 8-byte points of
// 8 rows at once, and 8 rows' sign bytes are then that gather's 64-bit mask) or 4 (IQ3: index h of
// the group is the point of half h; one gather fetches the 4-byte points of all 16 rows).
#include <cstdint>

#include "quant/iq_grids.h"
#include "util/ggml_type.h"

namespace mla::quant {

struct IqPackedSpec {
  int n_scales = 0;     // scale groups per super-block: 8 (per 32 columns) or 16 (per 16)
  int idx_bytes = 0;    // 1 (8-bit indices) or 2
  int n_idx = 0;        // indices per group of 8 columns: 1 (8-byte points) or 2 (4-byte points)
  int point_bytes = 0;  // 8 or 4
  float inv_den = 0;    // 1/8, 1/4 or 1: the value's divisor, a power of two
  const void* grid = nullptr;
  bool shift = false;  // IQ1: points -1/0/+1 plus a +-1/8 shift per group, no signs
  int offset = 64;     // added to each weight byte to make it unsigned for vpdpbusd

  constexpr int64_t ls_offset() const { return 32; }
  constexpr int64_t idx_offset() const { return 32 + 16 * n_scales; }
  constexpr int64_t mask_offset() const { return idx_offset() + 32 * n_idx * 16 * idx_bytes; }
  constexpr int64_t bytes() const { return mask_offset() + (shift ? 32 * 2 : 32 * 2 * 8); }
};

// The spec of t; n_scales == 0 when t has no such layout.
constexpr IqPackedSpec iq_packed_spec(GgmlType t) {
  switch (t) {
    case GgmlType::IQ2_XXS:
      return {8, 1, 1, 8, 0.125f, kIQ2XXSGrid};
    case GgmlType::IQ2_XS:
      return {16, 2, 1, 8, 0.125f, kIQ2XSGrid};
    case GgmlType::IQ2_S:
      return {16, 2, 1, 8, 0.125f, kIQ2SGrid};
    case GgmlType::IQ3_XXS:
      return {8, 1, 2, 4, 0.25f, kIQ3XXSGrid};
    case GgmlType::IQ3_S:
      return {8, 2, 2, 4, 1.0f, kIQ3SGrid};
    case GgmlType::IQ1_S:
      return {8, 2, 1, 8, 0.125f, kIQ1SGrid, true, 9};
    case GgmlType::IQ1_M:
      return {16, 2, 1, 8, 0.125f, kIQ1SGrid, true, 9};
    default:
      return {};
  }
}

}  // namespace mla::quant
