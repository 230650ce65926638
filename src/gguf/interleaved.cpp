// Undoes ik_llama.cpp's row interleaving (interleaved.h). Each group of n_interleaved rows is
// stored as one interleaved block per base block column: block column ib of the group holds block
// ib of every row of the group. The layouts are ik_llama.cpp's (ggml-common.h, its repack_*
// functions); the inverses are ours.
#include "gguf/interleaved.h"

#include <array>
#include <cstring>
#include <type_traits>

#include "util/error.h"
#include "util/ggml_blocks.h"

namespace mla {
namespace {

using quant::BlockIQ1_S;
using quant::BlockIQ4_K;
using quant::BlockIQ4_KS;
using quant::BlockIQ4_XS;
using quant::BlockIQ5_K;
using quant::BlockIQ5_KS;
using quant::BlockQ4_0;
using quant::BlockQ4_K;
using quant::BlockQ6_0;
using quant::BlockQ6_K;
using quant::BlockQ8_0;
using quant::kQK;
using quant::kQK_K;

constexpr std::array kForms = {
    IkInterleavedForm{202, "Q4_0_R8", GgmlType::Q4_0, 8},
    IkInterleavedForm{208, "Q8_0_R8", GgmlType::Q8_0, 8},
    IkInterleavedForm{212, "Q4_K_R4", GgmlType::Q4_K, 4},
    IkInterleavedForm{214, "Q6_K_R4", GgmlType::Q6_K, 4},
    IkInterleavedForm{223, "IQ4_XS_R8", GgmlType::IQ4_XS, 8},
    IkInterleavedForm{219, "IQ1_S_R4", GgmlType::IQ1_S, 4, 32, 6, 2},
    IkInterleavedForm{233, "Q6_0_R4", GgmlType::Q6_0, 4},
    IkInterleavedForm{339, "IQ4_K_R4", GgmlType::IQ4_K, 4},
    IkInterleavedForm{340, "IQ5_K_R4", GgmlType::IQ5_K, 4},
    IkInterleavedForm{344, "IQ4_KS_R4", GgmlType::IQ4_KS, 4},
    IkInterleavedForm{352, "IQ5_KS_R4", GgmlType::IQ5_KS, 4},
};

// IQ1_S_R4: fp16 d[4] (one per row) | per 32 elements: qs[16], uint16 qh[4]. Row k's sub-block is
// IQ1_S's (grid index low bytes qs[4i + k], i = 0..3; qh[k]: 3 high bits per index, 3-bit scale,
// shift sign) under a per-row scale, so each IQ1_S super-block of the row takes the row's d.
// Rows must hold whole 256-element super-blocks.
void iq1_s_r4_rows(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
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

// Q4_0_R8: fp16 d[8] | qs[128]: bytes 4l..4l+3 of row k's qs at 32l + 4k (l = 0..3).
void from_q4_0_r8(const uint8_t* src, BlockQ4_0* const rows[8], int64_t ib) {
  uint16_t d[8];
  std::memcpy(d, src, 16);
  const uint8_t* qs = src + 16;
  for (int k = 0; k < 8; ++k) {
    BlockQ4_0& b = rows[k][ib];
    b.d = d[k];
    for (int l = 0; l < 4; ++l)
      for (int i = 0; i < 4; ++i) b.qs[4 * l + i] = qs[32 * l + 4 * k + i];
  }
}

// Q8_0_R8: fp16 d[8] | qs[256]: quants 4l..4l+3 of row k at 32l + 4k, quants 16+4l.. at 128 + 32l + 4k.
void from_q8_0_r8(const uint8_t* src, BlockQ8_0* const rows[8], int64_t ib) {
  uint16_t d[8];
  std::memcpy(d, src, 16);
  const auto* qs = reinterpret_cast<const int8_t*>(src + 16);
  for (int k = 0; k < 8; ++k) {
    BlockQ8_0& b = rows[k][ib];
    b.d = d[k];
    for (int l = 0; l < 4; ++l)
      for (int i = 0; i < 4; ++i) {
        b.qs[4 * l + i] = qs[32 * l + 4 * k + i];
        b.qs[16 + 4 * l + i] = qs[128 + 32 * l + 4 * k + i];
      }
  }
}

// Q4_K_R4: fp16 d[4], dmin[4] | scales_h[16] | scales_l[32] | qs[512]. Sub-block ib of row k is
// entry s = 4ib + k: scales_l[s] holds the low nibbles of its scale and min, scales_h[s % 16] their
// high 2 bits each (scale bits 0-1, min bits 2-3, shifted by 4 (s / 16)). Its quants: byte
// 64ib + 4k + i + 16c (c = 0..3) holds elements i + {0, 16, 4, 20}[c] (low nibble) and 8 more
// (high nibble), i = 0..3.
void from_q4_k_r4(const uint8_t* src, BlockQ4_K* const rows[4], int64_t ibl) {
  uint16_t d[8];
  std::memcpy(d, src, 16);
  const uint8_t* scales_h = src + 16;
  const uint8_t* scales_l = src + 32;
  const uint8_t* qs = src + 64;
  constexpr int kFirst[4] = {0, 16, 4, 20};
  for (int k = 0; k < 4; ++k) {
    BlockQ4_K& b = rows[k][ibl];
    b.d = d[k];
    b.dmin = d[k + 4];
    uint8_t sc[8], mn[8], level[kQK_K];
    for (int ib = 0; ib < 8; ++ib) {
      const int s = 4 * ib + k;
      const int h = scales_h[s % 16] >> (4 * (s / 16));
      sc[ib] = static_cast<uint8_t>((scales_l[s] & 0x0F) | (h & 3) << 4);
      mn[ib] = static_cast<uint8_t>((scales_l[s] >> 4) | ((h >> 2) & 3) << 4);
      for (int c = 0; c < 4; ++c)
        for (int i = 0; i < 4; ++i) {
          const uint8_t q = qs[64 * ib + 4 * k + i + 16 * c];
          level[32 * ib + kFirst[c] + i] = q & 0x0F;
          level[32 * ib + kFirst[c] + i + 8] = q >> 4;
        }
    }
    quant::pack_k4_scales(sc, mn, b.scales);
    // Q4_K: element 64j + l in the low nibble of qs[32j + l], element 64j + 32 + l in the high one.
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 32; ++l)
        b.qs[32 * j + l] = static_cast<uint8_t>(level[64 * j + l] | level[64 * j + 32 + l] << 4);
  }
}

// Q6_K_R4: fp16 d[4] | int8 scales[64] | qh[256] | ql[512]. Row k's 16-element scales 2ib, 2ib+1
// at 8ib + k and 8ib + k + 4. Its 6-bit levels: low nibbles as Q4_K_R4's quants (ql byte
// 64ib + 4k + i + 16c, elements i + {0, 16, 4, 20}[c] and 8 more); high 2 bits of elements
// i + {0, 8, 4, 12} (bits 0-1, 2-3, 4-5, 6-7) in qh[32ib + 4k + i], of i + {16, 24, 20, 28} in
// qh[32ib + 4k + i + 16].
void from_q6_k_r4(const uint8_t* src, BlockQ6_K* const rows[4], int64_t ibl) {
  uint16_t d[4];
  std::memcpy(d, src, 8);
  const auto* scales = reinterpret_cast<const int8_t*>(src + 8);
  const uint8_t* qh = src + 8 + 64;
  const uint8_t* ql = qh + 256;
  constexpr int kFirst[4] = {0, 16, 4, 20};
  constexpr int kHigh[2][4] = {{0, 8, 4, 12}, {16, 24, 20, 28}};
  for (int k = 0; k < 4; ++k) {
    BlockQ6_K& b = rows[k][ibl];
    b.d = d[k];
    uint8_t level[kQK_K];
    for (int ib = 0; ib < 8; ++ib) {
      b.scales[2 * ib] = scales[8 * ib + k];
      b.scales[2 * ib + 1] = scales[8 * ib + k + 4];
      for (int i = 0; i < 4; ++i) {
        for (int c = 0; c < 4; ++c) {
          const uint8_t q = ql[64 * ib + 4 * k + i + 16 * c];
          level[32 * ib + kFirst[c] + i] = q & 0x0F;
          level[32 * ib + kFirst[c] + i + 8] = q >> 4;
        }
        for (int half = 0; half < 2; ++half) {
          const uint8_t h = qh[32 * ib + 4 * k + i + 16 * half];
          for (int f = 0; f < 4; ++f)
            level[32 * ib + kHigh[half][f] + i] |= static_cast<uint8_t>(((h >> (2 * f)) & 3) << 4);
        }
      }
    }
    // Q6_K: element 128h + r: low nibble (r / 64) of ql[64h + r % 64], high bits at 2 (r / 32) of qh[32h + r % 32].
    std::memset(b.ql, 0, sizeof(b.ql));
    std::memset(b.qh, 0, sizeof(b.qh));
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, r = e % 128;
      b.ql[64 * h + r % 64] |= static_cast<uint8_t>((level[e] & 0x0F) << (4 * (r / 64)));
      b.qh[32 * h + r % 32] |= static_cast<uint8_t>((level[e] >> 4) << (2 * (r / 32)));
    }
  }
}

// IQ4_XS_R8: fp16 d[8] | scales_h[16] | scales_l[32] | qs[1024]. Row k's sub-block ib is entry
// s = 8ib + k: 4 low scale bits in scales_l[s % 32] (nibble s / 32), 2 high bits in scales_h[s % 16]
// (bits 2 (s / 16)). Its quant bytes q[0..15] (IQ4_NL order): byte 128ib + 4k + i + 32c holds
// nibbles of q[i + 4 (2c % 4)] and q[i + 4 (2c % 4) + 4], low nibbles for c < 2, high for c >= 2.
void from_iq4_xs_r8(const uint8_t* src, BlockIQ4_XS* const rows[8], int64_t ibl) {
  uint16_t d[8];
  std::memcpy(d, src, 16);
  const uint8_t* scales_h = src + 16;
  const uint8_t* scales_l = src + 32;
  const uint8_t* qs = src + 64;
  for (int k = 0; k < 8; ++k) {
    BlockIQ4_XS& b = rows[k][ibl];
    b.d = d[k];
    b.scales_h = 0;
    std::memset(b.scales_l, 0, sizeof(b.scales_l));
    for (int ib = 0; ib < 8; ++ib) {
      const int s = 8 * ib + k;
      const int sl = (scales_l[s % 32] >> (4 * (s / 32))) & 0x0F;
      const int sh = (scales_h[s % 16] >> (2 * (s / 16))) & 3;
      b.scales_l[ib / 2] |= static_cast<uint8_t>(sl << (4 * (ib % 2)));
      b.scales_h |= static_cast<uint16_t>(sh << (2 * ib));
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

// The quants shared by ik's IQ4_K_R4, IQ5_K_R4, IQ4_KS_R4 and IQ5_KS_R4: row k's level of element
// kFirst[c] + 8h + i of sub-block ib (c, i = 0..3; h = 0, 1) has its low 4 bits in nibble h of
// qs[64ib + 4k + i + 16c] and, in the 5-bit forms (qh != nullptr), its fifth bit at bit 2c + h of
// qh[16ib + 4k + i].
void r4_levels(const uint8_t* qs, const uint8_t* qh, int k, uint8_t level[kQK_K]) {
  constexpr int kFirst[4] = {0, 16, 4, 20};
  for (int ib = 0; ib < kQK_K / kQK; ++ib)
    for (int c = 0; c < 4; ++c)
      for (int i = 0; i < 4; ++i)
        for (int h = 0; h < 2; ++h) {
          const int e = 32 * ib + kFirst[c] + 8 * h + i;
          level[e] = (qs[64 * ib + 4 * k + i + 16 * c] >> (4 * h)) & 0x0F;
          if (qh) level[e] |= static_cast<uint8_t>(((qh[16 * ib + 4 * k + i] >> (2 * c + h)) & 1) << 4);
        }
}

// 4-bit levels in IQ4_NL order (IQ4_K, IQ4_KS): element j of sub-block ib in the low nibble of
// qs[16ib + j], element j + 16 in the high one.
void pack_iq4_levels(const uint8_t level[kQK_K], uint8_t qs[kQK_K / 2]) {
  for (int ib = 0; ib < kQK_K / kQK; ++ib)
    for (int j = 0; j < 16; ++j)
      qs[16 * ib + j] = static_cast<uint8_t>(level[32 * ib + j] | level[32 * ib + j + 16] << 4);
}

// 5-bit levels as IQ5_K and IQ5_KS hold them: element 64m + 32h + l in nibble h of qs[32m + l], its
// fifth bit at bit 2m + h of qh[l].
void pack_iq5_levels(const uint8_t level[kQK_K], uint8_t qs[kQK_K / 2], uint8_t qh[kQK_K / 8]) {
  std::memset(qh, 0, kQK_K / 8);
  for (int m = 0; m < 4; ++m)
    for (int l = 0; l < 32; ++l) {
      const uint8_t lo = level[64 * m + l], hi = level[64 * m + 32 + l];
      qs[32 * m + l] = static_cast<uint8_t>((lo & 0x0F) | (hi & 0x0F) << 4);
      qh[l] |= static_cast<uint8_t>((lo >> 4) << (2 * m) | (hi >> 4) << (2 * m + 1));
    }
}

// IQ4_K_R4 / IQ5_K_R4: fp16 d[4] | extra[8] | scales_h[16] | scales_l[32] | qs[512] (| qh[128]).
// Row k's 16-element groups 2ib, 2ib + 1 are entries s = 8ib + k and s + 4: 4 low scale bits in
// scales_l[s % 32] (nibble s / 32), 2 high bits in scales_h[s % 16] (bits 2 (s / 16)), the value
// table bit at bit ib of extra[k] and extra[k + 4].
template <typename Block>
void from_iqk_r4(const uint8_t* src, Block* const rows[4], int64_t ibl) {
  constexpr bool kFive = std::is_same_v<Block, BlockIQ5_K>;
  uint16_t d[4];
  std::memcpy(d, src, 8);
  const uint8_t* extra = src + 8;
  const uint8_t* scales_h = src + 16;
  const uint8_t* scales_l = src + 32;
  const uint8_t* qs = src + 64;
  for (int k = 0; k < 4; ++k) {
    Block& b = rows[k][ibl];
    b.d = d[k];
    b.extra = 0;
    std::memset(b.scales_h, 0, sizeof(b.scales_h));
    for (int ib = 0; ib < 8; ++ib) {
      uint8_t sl[2], sh[2];
      for (int half = 0; half < 2; ++half) {
        const int s = 8 * ib + k + 4 * half;
        sl[half] = (scales_l[s % 32] >> (4 * (s / 32))) & 0x0F;
        sh[half] = (scales_h[s % 16] >> (2 * (s / 16))) & 3;
        b.extra |= static_cast<uint16_t>(((extra[k + 4 * half] >> ib) & 1) << (2 * ib + half));
      }
      b.scales_l[ib] = static_cast<uint8_t>(sl[0] | sl[1] << 4);
      b.scales_h[ib / 2] |= static_cast<uint8_t>((sh[0] | sh[1] << 2) << (4 * (ib % 2)));
    }
    uint8_t level[kQK_K];
    if constexpr (kFive) {
      r4_levels(qs, qs + 512, k, level);
      pack_iq5_levels(level, b.qs, b.qh);
    } else {
      r4_levels(qs, nullptr, k, level);
      pack_iq4_levels(level, b.qs);
    }
  }
}

// IQ4_KS_R4 / IQ5_KS_R4: a group of 4 rows is float d[4] (the rows' scales) followed by one block
// per 256 columns: scales[32] (row k's sub-block ib at 4ib + k, the byte unchanged) | qs[512]
// (| qh[128]), the quants as r4_levels reads them. Base rows: float d, then their blocks.
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
        if constexpr (kFive) {
          r4_levels(r4 + 32, r4 + 32 + 512, k, level);
          pack_iq5_levels(level, b.qs, b.qh);
        } else {
          r4_levels(r4 + 32, nullptr, k, level);
          pack_iq4_levels(level, b.qs);
        }
      }
    }
  }
}

// Q6_0_R4: fp16 d[4] | qh[32] | qs[64] per 32 columns. Row k's element kFirst[l] + 8h + i
// (l, i = 0..3; h = 0, 1): low 4 bits in nibble h of qs[4k + i + 16l], high 2 bits at bits
// 2 (l / 2) + 4h of qh[4k + i + 16 (l % 2)].
void from_q6_0_r4(const uint8_t* src, BlockQ6_0* const rows[4], int64_t ib) {
  uint16_t d[4];
  std::memcpy(d, src, 8);
  const uint8_t* qh = src + 8;
  const uint8_t* qs = src + 40;
  constexpr int kFirst[4] = {0, 16, 4, 20};
  for (int k = 0; k < 4; ++k) {
    uint8_t level[kQK];
    for (int l = 0; l < 4; ++l)
      for (int i = 0; i < 4; ++i)
        for (int h = 0; h < 2; ++h) {
          const uint8_t lo = (qs[4 * k + i + 16 * l] >> (4 * h)) & 0x0F;
          const uint8_t hi = (qh[4 * k + i + 16 * (l % 2)] >> (2 * (l / 2) + 4 * h)) & 3;
          level[kFirst[l] + 8 * h + i] = static_cast<uint8_t>(lo | hi << 4);
        }
    // Q6_0: element j < 16 in the low nibble of qs[j], j + 16 in the high one; their high 2 bits
    // at bits 4 (j / 8) and 4 (j / 8) + 2 of qh[j % 8].
    BlockQ6_0& b = rows[k][ib];
    b.d = d[k];
    std::memset(b.qh, 0, sizeof(b.qh));
    for (int j = 0; j < 16; ++j) {
      b.qs[j] = static_cast<uint8_t>((level[j] & 0x0F) | (level[j + 16] & 0x0F) << 4);
      b.qh[j % 8] |= static_cast<uint8_t>(((level[j] >> 4) | (level[j + 16] >> 4) << 2) << (4 * (j / 8)));
    }
  }
}

template <typename Block, int R>
void deinterleave(void (*one)(const uint8_t*, Block* const*, int64_t), int64_t block_elems, const uint8_t* src,
                  int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  const int64_t nb = n_cols / block_elems;
  constexpr auto kGroupBlock = static_cast<int64_t>(R * sizeof(Block));
  for (int64_t g = 0; g < n_rows / R; ++g) {
    Block* rows[R];
    for (int k = 0; k < R; ++k) rows[k] = reinterpret_cast<Block*>(dst) + (g * R + k) * nb;
    const uint8_t* group = src + g * nb * kGroupBlock;
    for (int64_t ib = 0; ib < nb; ++ib) one(group + ib * kGroupBlock, rows, ib);
  }
}

}  // namespace

const IkInterleavedForm* ik_interleaved_form(uint32_t ik_id) {
  for (const auto& f : kForms)
    if (f.ik_id == ik_id) return &f;
  return nullptr;
}

void deinterleave_rows(const IkInterleavedForm& f, const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  const int64_t block = ggml_traits(f.base).block_elems;
  if (n_rows % f.n_interleaved != 0 || n_cols % block != 0)
    fail("{}: {} rows of {} elements do not make whole groups of {} rows of {}-element blocks", f.name, n_rows, n_cols,
         f.n_interleaved, block);
  switch (f.base) {
    case GgmlType::Q4_0:
      deinterleave<BlockQ4_0, 8>(from_q4_0_r8, kQK, src, n_rows, n_cols, dst);
      return;
    case GgmlType::Q8_0:
      deinterleave<BlockQ8_0, 8>(from_q8_0_r8, kQK, src, n_rows, n_cols, dst);
      return;
    case GgmlType::Q4_K:
      deinterleave<BlockQ4_K, 4>(from_q4_k_r4, kQK_K, src, n_rows, n_cols, dst);
      return;
    case GgmlType::Q6_K:
      deinterleave<BlockQ6_K, 4>(from_q6_k_r4, kQK_K, src, n_rows, n_cols, dst);
      return;
    case GgmlType::IQ4_XS:
      deinterleave<BlockIQ4_XS, 8>(from_iq4_xs_r8, kQK_K, src, n_rows, n_cols, dst);
      return;
    case GgmlType::IQ1_S:
      iq1_s_r4_rows(src, n_rows, n_cols, dst);
      return;
    case GgmlType::Q6_0:
      deinterleave<BlockQ6_0, 4>(from_q6_0_r4, kQK, src, n_rows, n_cols, dst);
      return;
    case GgmlType::IQ4_K:
      deinterleave<BlockIQ4_K, 4>(from_iqk_r4<BlockIQ4_K>, kQK_K, src, n_rows, n_cols, dst);
      return;
    case GgmlType::IQ5_K:
      deinterleave<BlockIQ5_K, 4>(from_iqk_r4<BlockIQ5_K>, kQK_K, src, n_rows, n_cols, dst);
      return;
    case GgmlType::IQ4_KS:
      iqk_s_r4_rows<BlockIQ4_KS>(src, n_rows, n_cols, dst);
      return;
    case GgmlType::IQ5_KS:
      iqk_s_r4_rows<BlockIQ5_KS>(src, n_rows, n_cols, dst);
      return;
    default:
      fail("{}: no conversion to {}", f.name, ggml_type_name(f.base));
  }
}

}  // namespace mla
