// ik_llama.cpp's 4-row forms of its own IQ*_K and IQ*_KS types (IQ2_K_R4 .. IQ5_K_R4, IQ4_KS_R4,
// IQ5_KS_R4). Layouts: ik's ggml-common.h and repack_iq*_k* functions; the inverses are ours.
#include <cstring>
#include <type_traits>

#include "gguf/interleaved_families.h"

namespace mla::interleaved {
namespace {

using quant::BlockIQ2_K;
using quant::BlockIQ3_K;
using quant::BlockIQ4_K;
using quant::BlockIQ4_KS;
using quant::BlockIQ5_K;
using quant::BlockIQ5_KS;
using quant::kQK_K;

// Third-bit order of IQ3_K_R4 and fifth-bit order of IQ5_K_R4 / IQ5_KS_R4 (see r4_high_bits).
constexpr int kIQ3High[8] = {0, 4, 8, 12, 16, 20, 24, 28};
constexpr int kIQ5High[8] = {0, 8, 16, 24, 4, 12, 20, 28};

// Row k's value-table bits: that of its 16-element group 2ib + half is bit ib of
// extra[k + 4 half]. Returns the base types' extra word (bit g for group g).
uint16_t r4_extra(const uint8_t extra[8], int k) {
  uint16_t out = 0;
  for (int ib = 0; ib < 8; ++ib)
    for (int half = 0; half < 2; ++half)
      out |= static_cast<uint16_t>(((extra[k + 4 * half] >> ib) & 1) << (2 * ib + half));
  return out;
}

// Row k's 4-bit group values (IQ2_K's scales, IQ3_K's scale magnitudes): group 2ib + half is
// nibble s / 32 of scales[s % 32], s = 8ib + k + 4 half. Packed two per byte as the base types
// hold them (group 2ib low nibble of byte ib, 2ib + 1 high).
void r4_scale_nibbles(const uint8_t* scales, int k, uint8_t out[8]) {
  for (int ib = 0; ib < 8; ++ib) {
    uint8_t v[2];
    for (int half = 0; half < 2; ++half) {
      const int s = 8 * ib + k + 4 * half;
      v[half] = (scales[s % 32] >> (4 * (s / 32))) & 0x0F;
    }
    out[ib] = static_cast<uint8_t>(v[0] | v[1] << 4);
  }
}

// IQ2_K_R4: fp16 d[4] | extra[8] | scales[32] | qs[256] (r4_crumbs).
void from_iq2_k_r4(const uint8_t* src, BlockIQ2_K* const rows[4], int64_t ibl) {
  for (int k = 0; k < 4; ++k) {
    BlockIQ2_K& b = rows[k][ibl];
    std::memcpy(&b.d, src + 2 * k, 2);
    b.extra = r4_extra(src + 8, k);
    r4_scale_nibbles(src + 16, k, b.scales);
    uint8_t level[kQK_K];
    r4_crumbs(src + 48, k, level);
    pack_2bit_levels(level, b.qs);
  }
}

// IQ3_K_R4: fp16 d[4] | extra[8] | scales_h[8] | scales_l[32] | qs[256] | qh[128]. The sign of
// row k's group scale 2ib + half is bit s / 8 of scales_h[s % 8], s = 8ib + k + 4 half; levels:
// r4_crumbs, third bits in kIQ3High order.
void from_iq3_k_r4(const uint8_t* src, BlockIQ3_K* const rows[4], int64_t ibl) {
  const uint8_t* scales_h = src + 16;
  for (int k = 0; k < 4; ++k) {
    BlockIQ3_K& b = rows[k][ibl];
    std::memcpy(&b.d, src + 2 * k, 2);
    b.extra = r4_extra(src + 8, k);
    r4_scale_nibbles(src + 24, k, b.scales_l);
    b.scales_h = 0;
    for (int g = 0; g < 16; ++g) {
      const int s = 8 * (g / 2) + k + 4 * (g % 2);
      b.scales_h |= static_cast<uint16_t>(((scales_h[s % 8] >> (s / 8)) & 1) << g);
    }
    uint8_t level[kQK_K];
    r4_crumbs(src + 56, k, level);
    r4_high_bits(src + 312, k, kIQ3High, 2, level);
    pack_2bit_levels(level, b.qs);
    pack_third_bits(level, b.qh);
  }
}

// IQ4_K_R4 / IQ5_K_R4: fp16 d[4] | extra[8] | scales_h[16] | scales_l[32] | qs[512] (| qh[128]).
// Row k's 6-bit scales of groups 2ib, 2ib + 1 are r4_scale6 entries 8ib + k and 8ib + k + 4.
// Levels: r4_nibbles (and fifth bits in kIQ5High order).
template <typename Block>
void from_iqk_r4(const uint8_t* src, Block* const rows[4], int64_t ibl) {
  constexpr bool kFive = std::is_same_v<Block, BlockIQ5_K>;
  const uint8_t* scales_h = src + 16;
  const uint8_t* scales_l = src + 32;
  for (int k = 0; k < 4; ++k) {
    Block& b = rows[k][ibl];
    std::memcpy(&b.d, src + 2 * k, 2);
    b.extra = r4_extra(src + 8, k);
    std::memset(b.scales_h, 0, sizeof(b.scales_h));
    for (int ib = 0; ib < 8; ++ib) {
      const uint8_t s0 = r4_scale6(scales_l, scales_h, 8 * ib + k);
      const uint8_t s1 = r4_scale6(scales_l, scales_h, 8 * ib + k + 4);
      b.scales_l[ib] = static_cast<uint8_t>((s0 & 0x0F) | (s1 & 0x0F) << 4);
      b.scales_h[ib / 2] |= static_cast<uint8_t>(((s0 >> 4) | (s1 >> 4) << 2) << (4 * (ib % 2)));
    }
    uint8_t level[kQK_K];
    r4_nibbles(src + 64, k, level);
    if constexpr (kFive) {
      r4_high_bits(src + 576, k, kIQ5High, 4, level);
      pack_5bit_levels(level, b.qs, b.qh);
    } else {
      pack_iq4_levels(level, b.qs);
    }
  }
}

// IQ4_KS_R4 / IQ5_KS_R4: a group of 4 rows is float d[4] (the rows' scales) followed by one block
// per 256 columns: scales[32] (row k's sub-block ib at 4ib + k, the byte unchanged) | qs[512]
// (| qh[128]), the quants as in IQ4_K_R4 / IQ5_K_R4. Base rows: float d, then their blocks.
template <typename Block>
void iqk_s_r4_rows(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  constexpr bool kFive = std::is_same_v<Block, BlockIQ5_KS>;
  constexpr int64_t kR4Bytes = 4 * sizeof(Block);
  const int64_t nb = n_cols / kQK_K;
  const int64_t row_bytes = 4 + nb * static_cast<int64_t>(sizeof(Block));
  for (int64_t g = 0; g < n_rows / 4; ++g) {
    const uint8_t* group = src + g * 4 * row_bytes;
    for (int k = 0; k < 4; ++k) {
      uint8_t* row = dst + (4 * g + k) * row_bytes;
      std::memcpy(row, group + 4 * k, 4);
      auto* blocks = reinterpret_cast<Block*>(row + 4);
      for (int64_t ibl = 0; ibl < nb; ++ibl) {
        const uint8_t* r4 = group + 16 + ibl * kR4Bytes;
        Block& b = blocks[ibl];
        for (int ib = 0; ib < 8; ++ib) b.scales[ib] = r4[4 * ib + k];
        uint8_t level[kQK_K];
        r4_nibbles(r4 + 32, k, level);
        if constexpr (kFive) {
          r4_high_bits(r4 + 32 + 512, k, kIQ5High, 4, level);
          pack_5bit_levels(level, b.qs, b.qh);
        } else {
          pack_iq4_levels(level, b.qs);
        }
      }
    }
  }
}

}  // namespace

void iq2_k_r4(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  by_block_column<BlockIQ2_K, 4>(from_iq2_k_r4, kQK_K, src, n_rows, n_cols, dst);
}
void iq3_k_r4(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  by_block_column<BlockIQ3_K, 4>(from_iq3_k_r4, kQK_K, src, n_rows, n_cols, dst);
}
void iq4_k_r4(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  by_block_column<BlockIQ4_K, 4>(from_iqk_r4<BlockIQ4_K>, kQK_K, src, n_rows, n_cols, dst);
}
void iq5_k_r4(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  by_block_column<BlockIQ5_K, 4>(from_iqk_r4<BlockIQ5_K>, kQK_K, src, n_rows, n_cols, dst);
}
void iq4_ks_r4(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  iqk_s_r4_rows<BlockIQ4_KS>(src, n_rows, n_cols, dst);
}
void iq5_ks_r4(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  iqk_s_r4_rows<BlockIQ5_KS>(src, n_rows, n_cols, dst);
}

}  // namespace mla::interleaved
