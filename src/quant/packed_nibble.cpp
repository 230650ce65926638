// Packed 16-row groups of the 4-bit-index types (layouts in packed_nibble.h): the packer (run
// once at load) and the scalar twin of the AVX-512 kernel, bit-identical to it.
#include "quant/packed_nibble.h"

#include <cmath>
#include <cstring>
#include <type_traits>

#include "quant/kernels.h"

MLA_NO_FP_CONTRACT

namespace mla::quant {
namespace {

// The 16 rows' bytes qs[0..15] of one 32-column block (or sub-block) into 4 k-groups x 64 bytes.
void pack_nibbles(const uint8_t* qs, int r, uint8_t* quants) {
  for (int g = 0; g < 4; ++g) std::memcpy(quants + 64 * g + 4 * r, qs + 4 * g, 4);
}

template <typename Block>
void pack32(const NibblePackedSpec& sp, const uint8_t* src, int64_t row_bytes, int64_t n_cols, uint8_t* dst) {
  std::memset(dst, 0, static_cast<size_t>(n_cols / kQK * sp.bytes()));
  for (int64_t b = 0; b < n_cols / kQK; ++b) {
    uint8_t* out = dst + b * sp.bytes();
    for (int r = 0; r < kPackedRows; ++r) {
      const Block& blk = reinterpret_cast<const Block*>(src + r * row_bytes)[b];
      if constexpr (std::is_same_v<Block, BlockMXFP4>)
        out[2 * r] = blk.e;
      else
        std::memcpy(out + 2 * r, &blk.d, 2);
      pack_nibbles(blk.qs, r, out + sp.quants_offset());
      if constexpr (std::is_same_v<Block, BlockQ5_0>) {
        uint32_t qh;
        std::memcpy(&qh, blk.qh, 4);
        for (int i = 0; i < 4; ++i) {
          uint8_t bits = 0;
          for (int g = 0; g < 4; ++g)
            bits =
                static_cast<uint8_t>(bits | ((qh >> (4 * g + i)) & 1) << g | ((qh >> (16 + 4 * g + i)) & 1) << (4 + g));
          out[sp.bits_offset() + 4 * r + i] = bits;
        }
      }
      if constexpr (std::is_same_v<Block, BlockQ6_0>) {
        // Column j < 16 has its top bits at bits 4(j/8).. of qh[j%8], column j + 16 two above.
        for (int c = 0; c < kQK; ++c) {
          const int j = c % 16, g = j / 4, i = j % 4;
          const int top = (blk.qh[j % 8] >> (4 * (j / 8) + 2 * (c / 16))) & 3;
          out[sp.bits_offset() + 64 * (c / 16) + 4 * r + i] |= static_cast<uint8_t>(top << (2 * g));
        }
      }
    }
  }
}

void pack_iq4_xs(const NibblePackedSpec& sp, const uint8_t* src, int64_t row_bytes, int64_t n_cols, uint8_t* dst) {
  for (int64_t b = 0; b < n_cols / kQK_K; ++b) {
    uint8_t* out = dst + b * sp.bytes();
    for (int r = 0; r < kPackedRows; ++r) {
      const auto& blk = reinterpret_cast<const BlockIQ4_XS*>(src + r * row_bytes)[b];
      std::memcpy(out + 2 * r, &blk.d, 2);
      for (int s = 0; s < 8; ++s) {
        const int ls = ((blk.scales_l[s / 2] >> (4 * (s % 2))) & 0x0F) | (((blk.scales_h >> (2 * s)) & 3) << 4);
        out[32 + 16 * s + r] = static_cast<uint8_t>(static_cast<int8_t>(ls - 32));
        pack_nibbles(blk.qs + 16 * s, r, out + sp.quants_offset() + 256 * s);
      }
    }
  }
}

// The level of column c (0..31) of row r in a 32-column block's planes.
int level(const NibblePackedSpec& sp, const uint8_t* quants, const uint8_t* bits, int r, int c) {
  const int g = (c % 16) / 4, i = c % 4;
  int v = (quants[64 * g + 4 * r + i] >> (c < 16 ? 0 : 4)) & 0x0F;
  if (sp.lookup) return sp.table[v];
  if (sp.high_bits == 1) v |= ((bits[4 * r + i] >> (c < 16 ? g : 4 + g)) & 1) << 4;
  if (sp.high_bits == 2) v |= ((bits[64 * (c / 16) + 4 * r + i] >> (2 * g)) & 3) << 4;
  return v - sp.offset;
}

float scale_at(GgmlType t, const uint8_t* blk, int r) {
  if (t == GgmlType::MXFP4) return e8m0_to_fp32_half(blk[2 * r]);
  uint16_t h;
  std::memcpy(&h, blk + 2 * r, 2);
  return fp16_to_fp32(h);
}

// 32-column types against Q8_0: per block isum = sum(level * a), exact; acc = fma(scale * d_a,
// isum, acc) in block order.
template <GgmlType kType>
void gemm32_ref(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, int n_tok, float* out) {
  constexpr NibblePackedSpec sp = nibble_packed_spec(kType);
  for (int t = 0; t < n_tok; ++t) {
    const auto* a = reinterpret_cast<const BlockQ8_0*>(act + t * act_stride);
    for (int r = 0; r < kPackedRows; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < n_cols / kQK; ++b) {
        const uint8_t* blk = group + b * sp.bytes();
        int32_t isum = 0;
        for (int c = 0; c < kQK; ++c)
          isum += level(sp, blk + sp.quants_offset(), blk + sp.bits_offset(), r, c) * a[b].qs[c];
        acc = std::fma(scale_at(kType, blk, r) * fp16_to_fp32(a[b].d), static_cast<float>(isum), acc);
      }
      out[t * kPackedRows + r] = acc;
    }
  }
}

// IQ4_XS against Q8_K: tot = sum over sub-blocks of (ls - 32) * sum(level * a), exact;
// acc = fma(d * d_a, tot, acc) per super-block.
void gemm_iq4_xs_ref(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, int n_tok,
                     float* out) {
  constexpr NibblePackedSpec sp = nibble_packed_spec(GgmlType::IQ4_XS);
  for (int t = 0; t < n_tok; ++t) {
    const auto* a = reinterpret_cast<const BlockQ8_K*>(act + t * act_stride);
    for (int r = 0; r < kPackedRows; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < n_cols / kQK_K; ++b) {
        const uint8_t* blk = group + b * sp.bytes();
        int32_t tot = 0;
        for (int s = 0; s < 8; ++s) {
          int32_t isum = 0;
          for (int c = 0; c < 32; ++c)
            isum += level(sp, blk + sp.quants_offset() + 256 * s, nullptr, r, c) * a[b].qs[32 * s + c];
          tot += static_cast<int8_t>(blk[32 + 16 * s + r]) * isum;
        }
        acc = std::fma(scale_at(GgmlType::IQ4_XS, blk, r) * a[b].d, static_cast<float>(tot), acc);
      }
      out[t * kPackedRows + r] = acc;
    }
  }
}

}  // namespace

int64_t packed_nibble_group_bytes(GgmlType t, int64_t n_cols) {
  const NibblePackedSpec sp = nibble_packed_spec(t);
  return sp.block_cols ? n_cols / sp.block_cols * sp.bytes() : 0;
}

void pack_nibble_rows(GgmlType t, const uint8_t* src, int64_t row_bytes, int64_t n_cols, uint8_t* dst) {
  const NibblePackedSpec sp = nibble_packed_spec(t);
  switch (t) {
    case GgmlType::Q4_0:
      return pack32<BlockQ4_0>(sp, src, row_bytes, n_cols, dst);
    case GgmlType::Q5_0:
      return pack32<BlockQ5_0>(sp, src, row_bytes, n_cols, dst);
    case GgmlType::Q6_0:
      return pack32<BlockQ6_0>(sp, src, row_bytes, n_cols, dst);
    case GgmlType::IQ4_NL:
      return pack32<BlockIQ4_NL>(sp, src, row_bytes, n_cols, dst);
    case GgmlType::MXFP4:
      return pack32<BlockMXFP4>(sp, src, row_bytes, n_cols, dst);
    case GgmlType::IQ4_XS:
      return pack_iq4_xs(sp, src, row_bytes, n_cols, dst);
    default:
      return;
  }
}

PackedGemmFn packed_gemm_nibble_ref_fn(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0:
      return gemm32_ref<GgmlType::Q4_0>;
    case GgmlType::Q5_0:
      return gemm32_ref<GgmlType::Q5_0>;
    case GgmlType::Q6_0:
      return gemm32_ref<GgmlType::Q6_0>;
    case GgmlType::IQ4_NL:
      return gemm32_ref<GgmlType::IQ4_NL>;
    case GgmlType::MXFP4:
      return gemm32_ref<GgmlType::MXFP4>;
    case GgmlType::IQ4_XS:
      return gemm_iq4_xs_ref;
    default:
      return nullptr;
  }
}

}  // namespace mla::quant
