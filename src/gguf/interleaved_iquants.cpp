// ik_llama.cpp's interleaved forms of the lattice i-quants (IQ1_S_R4, IQ2_XXS_R4, IQ2_XS_R4,
// IQ2_S_R4, IQ3_XXS_R4, IQ3_S_R4) and of IQ4_XS (IQ4_XS_R8). Layouts: ik's ggml-common.h and
// repack_iq* functions; the inverses are ours.
#include <cstring>

#include "gguf/interleaved_families.h"

namespace mla::interleaved {
namespace {

using quant::BlockIQ1_S;
using quant::BlockIQ2_S;
using quant::BlockIQ2_XS;
using quant::BlockIQ2_XXS;
using quant::BlockIQ3_S;
using quant::BlockIQ3_XXS;
using quant::BlockIQ4_XS;
using quant::kQK;
using quant::kQK_K;

// The IQ2_XXS / IQ2_XS / IQ3_XXS 7-bit sign index s (signs of elements 0..6 of a group of 8; the
// eighth makes the count even) is stored by the _R4 forms as t with t_0 = s_0 and
// t_j = s_j ^ t_(j-1): t's bits read as differences give s back.
uint32_t sign_index(uint32_t t) { return (t ^ (t << 1)) & 127; }

// IQ2_XXS_R4 / IQ3_XXS_R4 "sas" word of row k, sub-block ib: byte m = t_m << 1 | bit m of the
// 4-bit scale. Returns the base types' word: 4 x 7 sign-index bits, scale in bits 28-31.
uint32_t signs_and_scale(const uint8_t* sas) {
  uint32_t word = 0;
  for (int m = 0; m < 4; ++m) {
    word |= sign_index(sas[m] >> 1) << (7 * m);
    word |= static_cast<uint32_t>(sas[m] & 1) << (28 + m);
  }
  return word;
}

// IQ2_XXS_R4: fp16 d[4] | sas[128] (row k, sub-block ib at 4 (4ib + k)) | qs[128] (grid byte i at
// 16ib + 4k + i). IQ2_XXS: per sub-block 4 grid bytes, then the sign/scale word.
void from_iq2_xxs_r4(const uint8_t* src, BlockIQ2_XXS* const rows[4], int64_t ibl) {
  const uint8_t* sas = src + 8;
  const uint8_t* qs = src + 136;
  for (int k = 0; k < 4; ++k) {
    BlockIQ2_XXS& b = rows[k][ibl];
    std::memcpy(&b.d, src + 2 * k, 2);
    auto* out = reinterpret_cast<uint8_t*>(b.qs);
    for (int ib = 0; ib < kQK_K / kQK; ++ib) {
      for (int i = 0; i < 4; ++i) out[8 * ib + i] = qs[16 * ib + 4 * k + i];
      const uint32_t word = signs_and_scale(sas + 4 * (4 * ib + k));
      std::memcpy(out + 8 * ib + 4, &word, 4);
    }
  }
}

// IQ3_XXS_R4: fp16 d[4] | sas[128] (as IQ2_XXS_R4) | qs[256] (grid byte i of sub-block ib at
// 32ib + 8k + i). IQ3_XXS: 64 grid bytes, then the 8 sign/scale words.
void from_iq3_xxs_r4(const uint8_t* src, BlockIQ3_XXS* const rows[4], int64_t ibl) {
  const uint8_t* sas = src + 8;
  const uint8_t* qs = src + 136;
  for (int k = 0; k < 4; ++k) {
    BlockIQ3_XXS& b = rows[k][ibl];
    std::memcpy(&b.d, src + 2 * k, 2);
    for (int ib = 0; ib < kQK_K / kQK; ++ib) {
      for (int i = 0; i < 8; ++i) b.qs[8 * ib + i] = qs[32 * ib + 8 * k + i];
      const uint32_t word = signs_and_scale(sas + 4 * (4 * ib + k));
      std::memcpy(b.qs + 64 + 4 * ib, &word, 4);
    }
  }
}

// IQ2_XS_R4: fp16 d[4] | uint16 qs[128] (row k's entry i of sub-block ib at 16ib + 4k + i: 9-bit
// grid index | t << 9) | scales[32] (row k's byte ib at 4ib + k).
void from_iq2_xs_r4(const uint8_t* src, BlockIQ2_XS* const rows[4], int64_t ibl) {
  const uint8_t* qs = src + 8;
  const uint8_t* scales = src + 264;
  for (int k = 0; k < 4; ++k) {
    BlockIQ2_XS& b = rows[k][ibl];
    std::memcpy(&b.d, src + 2 * k, 2);
    for (int ib = 0; ib < kQK_K / kQK; ++ib) {
      b.scales[ib] = scales[4 * ib + k];
      for (int i = 0; i < 4; ++i) {
        uint16_t v;
        std::memcpy(&v, qs + 2 * (16 * ib + 4 * k + i), 2);
        b.qs[4 * ib + i] = static_cast<uint16_t>((v & 511) | sign_index(v >> 9) << 9);
      }
    }
  }
}

// IQ2_S_R4: fp16 d[4] | qs[128] | qh[32] | signs[128] | scales[32]: row k's bytes of sub-block ib
// at 16ib + 4k + i (qs, signs; i = 0..3) and 4ib + k (qh, scales), unchanged.
void from_iq2_s_r4(const uint8_t* src, BlockIQ2_S* const rows[4], int64_t ibl) {
  const uint8_t* qs = src + 8;
  const uint8_t* qh = src + 136;
  const uint8_t* signs = src + 168;
  const uint8_t* scales = src + 296;
  for (int k = 0; k < 4; ++k) {
    BlockIQ2_S& b = rows[k][ibl];
    std::memcpy(&b.d, src + 2 * k, 2);
    for (int ib = 0; ib < kQK_K / kQK; ++ib) {
      b.qh[ib] = qh[4 * ib + k];
      b.scales[ib] = scales[4 * ib + k];
      for (int i = 0; i < 4; ++i) {
        b.qs[4 * ib + i] = qs[16 * ib + 4 * k + i];
        b.qs[32 + 4 * ib + i] = signs[16 * ib + 4 * k + i];
      }
    }
  }
}

// IQ3_S_R4: fp16 d[4] | qs[256] | qh[32] | signs[128] | scales[16]. Row k, sub-block ib: grid
// bytes i and i + 4 (i = 0..3) at 32ib + k + 8i and + 4; qh byte at 4ib + k; sign byte m's bits i
// and 4 + i at bits 2m and 2m + 1 of signs[16ib + 4k + i]. The 4-bit scales of row k's 64-element
// half-blocks 2j, 2j + 1 (IQ3_S byte j) are nibble s / 16 of scales[s % 16], s = 8j + k and s + 4.
void from_iq3_s_r4(const uint8_t* src, BlockIQ3_S* const rows[4], int64_t ibl) {
  const uint8_t* qs = src + 8;
  const uint8_t* qh = src + 264;
  const uint8_t* signs = src + 296;
  const uint8_t* scales = src + 424;
  for (int k = 0; k < 4; ++k) {
    BlockIQ3_S& b = rows[k][ibl];
    std::memcpy(&b.d, src + 2 * k, 2);
    for (int j = 0; j < kQK_K / 64; ++j) {
      const int s = 8 * j + k;
      const int lo = (scales[s % 16] >> (4 * (s / 16))) & 0x0F;
      const int hi = (scales[(s + 4) % 16] >> (4 * ((s + 4) / 16))) & 0x0F;
      b.scales[j] = static_cast<uint8_t>(lo | hi << 4);
    }
    std::memset(b.signs, 0, sizeof(b.signs));
    for (int ib = 0; ib < kQK_K / kQK; ++ib) {
      b.qh[ib] = qh[4 * ib + k];
      for (int i = 0; i < 4; ++i) {
        b.qs[8 * ib + i] = qs[32 * ib + k + 8 * i];
        b.qs[8 * ib + i + 4] = qs[32 * ib + k + 8 * i + 4];
        const uint8_t packed = signs[16 * ib + 4 * k + i];
        for (int m = 0; m < 4; ++m)
          b.signs[4 * ib + m] |=
              static_cast<uint8_t>(((packed >> (2 * m)) & 1) << i | ((packed >> (2 * m + 1)) & 1) << (4 + i));
      }
    }
  }
}

// IQ4_XS_R8: fp16 d[8] | scales_h[16] | scales_l[32] | qs[1024]. Row k's sub-block ib is entry
// s = 8ib + k: 4 low scale bits in scales_l[s % 32] (nibble s / 32), 2 high bits in scales_h[s % 16]
// (bits 2 (s / 16)). Its quant bytes q[0..15] (IQ4_NL order): byte 128ib + 4k + i + 32c holds
// nibbles of q[i + 4 (2c % 4)] and q[i + 4 (2c % 4) + 4], low nibbles for c < 2, high for c >= 2.
void from_iq4_xs_r8(const uint8_t* src, BlockIQ4_XS* const rows[8], int64_t ibl) {
  const uint8_t* scales_h = src + 16;
  const uint8_t* scales_l = src + 32;
  const uint8_t* qs = src + 64;
  for (int k = 0; k < 8; ++k) {
    BlockIQ4_XS& b = rows[k][ibl];
    std::memcpy(&b.d, src + 2 * k, 2);
    b.scales_h = 0;
    std::memset(b.scales_l, 0, sizeof(b.scales_l));
    for (int ib = 0; ib < 8; ++ib) {
      const uint8_t s = r4_scale6(scales_l, scales_h, 8 * ib + k);
      b.scales_l[ib / 2] |= static_cast<uint8_t>((s & 0x0F) << (4 * (ib % 2)));
      b.scales_h |= static_cast<uint16_t>((s >> 4) << (2 * ib));
      const uint8_t* r = qs + 128 * ib + 4 * k;
      uint8_t* q = b.qs + 16 * ib;
      for (int i = 0; i < 4; ++i) {
        q[i] = static_cast<uint8_t>((r[i] & 0x0F) | (r[i + 64] & 0x0F) << 4);
        q[i + 4] = static_cast<uint8_t>((r[i] >> 4) | (r[i + 64] >> 4) << 4);
        q[i + 8] = static_cast<uint8_t>((r[i + 32] & 0x0F) | (r[i + 96] & 0x0F) << 4);
        q[i + 12] = static_cast<uint8_t>((r[i + 32] >> 4) | (r[i + 96] >> 4) << 4);
      }
    }
  }
}

}  // namespace

// IQ1_S_R4: fp16 d[4] (one per row) | per 32 elements: qs[16], uint16 qh[4]. Row k's sub-block is
// IQ1_S's (grid index low bytes qs[4i + k], i = 0..3; qh[k]: 3 high bits per index, 3-bit scale,
// shift sign) under a per-row scale, so each IQ1_S super-block of the row takes the row's d.
// Rows must hold whole 256-element super-blocks.
void iq1_s_r4(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  const int64_t nb32 = n_cols / kQK, nb256 = n_cols / kQK_K;
  const int64_t group_bytes = 8 + nb32 * 24;
  for (int64_t g = 0; g < n_rows / 4; ++g) {
    const uint8_t* group = src + g * group_bytes;
    uint16_t d[4];
    std::memcpy(d, group, 8);
    for (int k = 0; k < 4; ++k) {
      auto* row = reinterpret_cast<BlockIQ1_S*>(dst) + (4 * g + k) * nb256;
      for (int64_t ib = 0; ib < nb32; ++ib) {
        const uint8_t* blk = group + 8 + ib * 24;
        BlockIQ1_S& b = row[ib / 8];
        const int64_t j = ib % 8;
        b.d = d[k];
        for (int i = 0; i < 4; ++i) b.qs[4 * j + i] = blk[4 * i + k];
        std::memcpy(&b.qh[j], blk + 16 + 2 * k, 2);
      }
    }
  }
}

void iq2_xxs_r4(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  by_block_column<BlockIQ2_XXS, 4>(from_iq2_xxs_r4, kQK_K, src, n_rows, n_cols, dst);
}
void iq2_xs_r4(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  by_block_column<BlockIQ2_XS, 4>(from_iq2_xs_r4, kQK_K, src, n_rows, n_cols, dst);
}
void iq2_s_r4(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  by_block_column<BlockIQ2_S, 4>(from_iq2_s_r4, kQK_K, src, n_rows, n_cols, dst);
}
void iq3_xxs_r4(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  by_block_column<BlockIQ3_XXS, 4>(from_iq3_xxs_r4, kQK_K, src, n_rows, n_cols, dst);
}
void iq3_s_r4(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  by_block_column<BlockIQ3_S, 4>(from_iq3_s_r4, kQK_K, src, n_rows, n_cols, dst);
}
void iq4_xs_r8(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  by_block_column<BlockIQ4_XS, 8>(from_iq4_xs_r8, kQK_K, src, n_rows, n_cols, dst);
}

}  // namespace mla::interleaved
