// Packed 16-row groups of the grid-and-sign i-quants (layout in packed_iq.h): the packer (run
// once at load) and the scalar twin of the AVX-512 kernel, bit-identical to it.
#include "quant/packed_iq.h"

#include <cmath>
#include <cstring>

#include "quant/kernels.h"
#include "util/ggml_blocks.h"

MLA_NO_FP_CONTRACT

namespace mla::quant {
namespace {

// One row's super-block, read into the packed layout's fields.
struct IqFields {
  uint16_t d;
  uint8_t ls[16];       // 2s+1 per scale group
  uint16_t idx[32][2];  // grid indices per group of 8 columns
  uint8_t sign[32];     // bit j: column 8g + j is negative (the parity rule already applied);
                        // IQ1: 1 when group g's shift is +1/8, else 0
};

uint32_t load32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

uint8_t scale_nibble(uint8_t byte, int high) { return static_cast<uint8_t>(2 * ((byte >> (4 * high)) & 0xf) + 1); }

void read_fields(const BlockIQ2_XXS& b, IqFields& f) {
  f.d = b.d;
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t idx = load32(b.qs + 4 * ib), aux = load32(b.qs + 4 * ib + 2);
    f.ls[ib] = static_cast<uint8_t>(2 * (aux >> 28) + 1);
    for (int l = 0; l < 4; ++l) {
      f.idx[4 * ib + l][0] = static_cast<uint16_t>((idx >> (8 * l)) & 0xff);
      f.sign[4 * ib + l] = kIQSigns[(aux >> (7 * l)) & 127];
    }
  }
}

void read_fields(const BlockIQ2_XS& b, IqFields& f) {
  f.d = b.d;
  for (int ib = 0; ib < 8; ++ib) {
    f.ls[2 * ib] = scale_nibble(b.scales[ib], 0);
    f.ls[2 * ib + 1] = scale_nibble(b.scales[ib], 1);
    for (int l = 0; l < 4; ++l) {
      const uint16_t v = b.qs[4 * ib + l];
      f.idx[4 * ib + l][0] = v & 511;
      f.sign[4 * ib + l] = kIQSigns[v >> 9];
    }
  }
}

void read_fields(const BlockIQ2_S& b, IqFields& f) {
  f.d = b.d;
  const uint8_t* signs = b.qs + kQK_K / 8;
  for (int ib = 0; ib < 8; ++ib) {
    f.ls[2 * ib] = scale_nibble(b.scales[ib], 0);
    f.ls[2 * ib + 1] = scale_nibble(b.scales[ib], 1);
    for (int l = 0; l < 4; ++l) {
      const int gi = 4 * ib + l;
      f.idx[gi][0] = static_cast<uint16_t>(b.qs[gi] | ((b.qh[ib] >> (2 * l)) & 3) << 8);
      f.sign[gi] = signs[gi];
    }
  }
}

void read_fields(const BlockIQ3_XXS& b, IqFields& f) {
  f.d = b.d;
  const uint8_t* words = b.qs + kQK_K / 4;
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t aux = load32(words + 4 * ib);
    f.ls[ib] = static_cast<uint8_t>(2 * (aux >> 28) + 1);
    for (int l = 0; l < 4; ++l) {
      const int gi = 4 * ib + l;
      f.idx[gi][0] = b.qs[8 * ib + 2 * l];
      f.idx[gi][1] = b.qs[8 * ib + 2 * l + 1];
      f.sign[gi] = kIQSigns[(aux >> (7 * l)) & 127];
    }
  }
}

void read_fields(const BlockIQ3_S& b, IqFields& f) {
  f.d = b.d;
  for (int ib = 0; ib < 8; ++ib) {
    f.ls[ib] = scale_nibble(b.scales[ib / 2], ib % 2);
    for (int l = 0; l < 4; ++l) {
      const int gi = 4 * ib + l;
      f.idx[gi][0] = static_cast<uint16_t>(b.qs[2 * gi] | ((b.qh[ib] >> (2 * l)) & 1) << 8);
      f.idx[gi][1] = static_cast<uint16_t>(b.qs[2 * gi + 1] | ((b.qh[ib] >> (2 * l + 1)) & 1) << 8);
      f.sign[gi] = b.signs[gi];
    }
  }
}

void read_fields(const BlockIQ1_S& b, IqFields& f) {
  f.d = b.d;
  for (int ib = 0; ib < 8; ++ib) {
    const uint16_t h = b.qh[ib];
    f.ls[ib] = static_cast<uint8_t>(2 * ((h >> 12) & 7) + 1);
    for (int l = 0; l < 4; ++l) {
      f.idx[4 * ib + l][0] = static_cast<uint16_t>(b.qs[4 * ib + l] | ((h >> (3 * l)) & 7) << 8);
      f.sign[4 * ib + l] = (h & 0x8000) ? 0 : 1;
    }
  }
}

void read_fields(const BlockIQ1_M& b, IqFields& f) {
  // d is spread over the top nibbles of the four scale words; each word holds 4 3-bit scales.
  uint16_t sc[4];
  std::memcpy(sc, b.scales, 8);
  f.d = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
  for (int s = 0; s < 16; ++s) f.ls[s] = static_cast<uint8_t>(2 * ((sc[s / 4] >> (3 * (s % 4))) & 7) + 1);
  for (int g = 0; g < 32; ++g) {
    const int h = b.qh[g / 2] >> (4 * (g % 2));  // this group's nibble: 3 index bits, shift sign
    f.idx[g][0] = static_cast<uint16_t>(b.qs[g] | (h & 7) << 8);
    f.sign[g] = (h & 8) ? 0 : 1;
  }
}

template <typename Block>
void pack(const IqPackedSpec& sp, const uint8_t* src, int64_t row_bytes, int64_t n_cols, uint8_t* dst) {
  std::memset(dst, 0, static_cast<size_t>(n_cols / kQK_K * sp.bytes()));
  IqFields f;
  for (int64_t b = 0; b < n_cols / kQK_K; ++b) {
    uint8_t* out = dst + b * sp.bytes();
    for (int r = 0; r < kPackedRows; ++r) {
      read_fields(reinterpret_cast<const Block*>(src + r * row_bytes)[b], f);
      std::memcpy(out + 2 * r, &f.d, 2);
      for (int s = 0; s < sp.n_scales; ++s) out[sp.ls_offset() + 16 * s + r] = f.ls[s];
      for (int g = 0; g < 32; ++g) {
        for (int k = 0; k < sp.n_idx; ++k)
          std::memcpy(out + sp.idx_offset() + ((g * sp.n_idx + k) * 16 + r) * sp.idx_bytes, &f.idx[g][k],
                      static_cast<size_t>(sp.idx_bytes));
        if (sp.shift) {
          out[sp.mask_offset() + 2 * g + r / 8] =
              static_cast<uint8_t>(out[sp.mask_offset() + 2 * g + r / 8] | f.sign[g] << (r % 8));
          continue;
        }
        if (sp.point_bytes == 8) {
          out[sp.mask_offset() + 16 * g + r] = f.sign[g];
          continue;
        }
        for (int h = 0; h < 2; ++h) {
          uint8_t* mask = out + sp.mask_offset() + 8 * (2 * g + h);
          const int nib = (f.sign[g] >> (4 * h)) & 0xf;  // bits 4r..4r+3 of the mask
          mask[r / 2] = static_cast<uint8_t>(mask[r / 2] | nib << (4 * (r % 2)));
        }
      }
    }
  }
}

// Grid byte j (0..3) of the point that column 4h + j of group g of row r reads.
int grid_byte(const IqPackedSpec& sp, const uint8_t* blk, int g, int h, int r, int j) {
  const int k = sp.n_idx == 2 ? h : 0;
  uint16_t idx = 0;
  std::memcpy(&idx, blk + sp.idx_offset() + ((g * sp.n_idx + k) * 16 + r) * sp.idx_bytes,
              static_cast<size_t>(sp.idx_bytes));
  const auto* grid = static_cast<const uint8_t*>(sp.grid);
  const int byte = sp.n_idx == 2 ? j : 4 * h + j;
  return grid[static_cast<size_t>(idx) * sp.point_bytes + byte];
}

// Whether column 8g + j of row r is negative.
bool negative(const IqPackedSpec& sp, const uint8_t* blk, int g, int r, int j) {
  if (sp.point_bytes == 8) return (blk[sp.mask_offset() + 16 * g + r] >> j) & 1;
  uint64_t mask;
  std::memcpy(&mask, blk + sp.mask_offset() + 8 * (2 * g + j / 4), 8);
  return (mask >> (4 * r + j % 4)) & 1;
}

// The integer weight of column 8g + 4h + j of row r: the signed grid value, or for IQ1
// 8 * grid + shift (shift +-1, over the denominator 8).
int weight(const IqPackedSpec& sp, const uint8_t* blk, int g, int h, int r, int j) {
  const int w = grid_byte(sp, blk, g, h, r, j);
  if (sp.shift) {
    const int up = (blk[sp.mask_offset() + 2 * g + r / 8] >> (r % 8)) & 1;
    return 8 * static_cast<int8_t>(w) + (up ? 1 : -1);
  }
  return negative(sp, blk, g, r, 4 * h + j) ? -w : w;
}

// Per (token, row): tot = sum over scale groups of ls * sum(grid * sign * a), exact in int32;
// then acc = fma((d * inv_den) * a.d, tot, acc) per super-block, in block order.
template <GgmlType kType>
void gemm_iq_ref(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, int n_tok, float* out) {
  constexpr IqPackedSpec sp = iq_packed_spec(kType);
  const int cols_per_scale = kQK_K / sp.n_scales;
  for (int t = 0; t < n_tok; ++t) {
    const auto* a = reinterpret_cast<const BlockQ8_K*>(act + t * act_stride);
    for (int r = 0; r < kPackedRows; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < n_cols / kQK_K; ++b) {
        const uint8_t* blk = group + b * sp.bytes();
        int32_t tot = 0;
        for (int s = 0; s < sp.n_scales; ++s) {
          int32_t isum = 0;
          for (int c = s * cols_per_scale; c < (s + 1) * cols_per_scale; ++c) {
            const int g = c / 8, h = (c / 4) % 2, j = c % 4;
            isum += weight(sp, blk, g, h, r, j) * a[b].qs[c];
          }
          tot += blk[sp.ls_offset() + 16 * s + r] * isum;
        }
        uint16_t dh;
        std::memcpy(&dh, blk + 2 * r, 2);
        acc = std::fma(fp16_to_fp32(dh) * sp.inv_den * a[b].d, static_cast<float>(tot), acc);
      }
      out[t * kPackedRows + r] = acc;
    }
  }
}

}  // namespace

int64_t packed_iq_group_bytes(GgmlType t, int64_t n_cols) {
  const IqPackedSpec sp = iq_packed_spec(t);
  return sp.n_scales ? n_cols / kQK_K * sp.bytes() : 0;
}

void pack_iq_rows(GgmlType t, const uint8_t* src, int64_t row_bytes, int64_t n_cols, uint8_t* dst) {
  const IqPackedSpec sp = iq_packed_spec(t);
  switch (t) {
    case GgmlType::IQ2_XXS:
      return pack<BlockIQ2_XXS>(sp, src, row_bytes, n_cols, dst);
    case GgmlType::IQ2_XS:
      return pack<BlockIQ2_XS>(sp, src, row_bytes, n_cols, dst);
    case GgmlType::IQ2_S:
      return pack<BlockIQ2_S>(sp, src, row_bytes, n_cols, dst);
    case GgmlType::IQ3_XXS:
      return pack<BlockIQ3_XXS>(sp, src, row_bytes, n_cols, dst);
    case GgmlType::IQ3_S:
      return pack<BlockIQ3_S>(sp, src, row_bytes, n_cols, dst);
    case GgmlType::IQ1_S:
      return pack<BlockIQ1_S>(sp, src, row_bytes, n_cols, dst);
    case GgmlType::IQ1_M:
      return pack<BlockIQ1_M>(sp, src, row_bytes, n_cols, dst);
    default:
      return;
  }
}

PackedGemmFn packed_gemm_iq_ref_fn(GgmlType t) {
  switch (t) {
    case GgmlType::IQ2_XXS:
      return gemm_iq_ref<GgmlType::IQ2_XXS>;
    case GgmlType::IQ2_XS:
      return gemm_iq_ref<GgmlType::IQ2_XS>;
    case GgmlType::IQ2_S:
      return gemm_iq_ref<GgmlType::IQ2_S>;
    case GgmlType::IQ3_XXS:
      return gemm_iq_ref<GgmlType::IQ3_XXS>;
    case GgmlType::IQ3_S:
      return gemm_iq_ref<GgmlType::IQ3_S>;
    case GgmlType::IQ1_S:
      return gemm_iq_ref<GgmlType::IQ1_S>;
    case GgmlType::IQ1_M:
      return gemm_iq_ref<GgmlType::IQ1_M>;
    default:
      return nullptr;
  }
}

}  // namespace mla::quant
