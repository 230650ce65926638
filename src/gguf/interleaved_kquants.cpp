// ik_llama.cpp's 4-row forms of the K-quants (Q2_K_R4 .. Q6_K_R4). Each 256-column block column
// of a group of 4 rows holds the rows' super-block scales side by side, then their sub-block scales
// and quants in the orders below. Layouts: ik's ggml-common.h and repack_q*_k functions; the
// inverses are ours.
#include <cstring>

#include "gguf/interleaved_families.h"

namespace mla::interleaved {
namespace {

using quant::BlockQ2_K;
using quant::BlockQ3_K;
using quant::BlockQ4_K;
using quant::BlockQ5_K;
using quant::BlockQ6_K;
using quant::kQK_K;

// Third-bit order of Q3_K_R4 (bit b of a qh byte: element 4b + i) and fifth-bit order of
// Q5_K_R4 (see r4_high_bits).
constexpr int kQ3High[8] = {0, 4, 8, 12, 16, 20, 24, 28};
constexpr int kQ5High[8] = {0, 8, 4, 12, 16, 24, 20, 28};

// Q2_K_R4: fp16 d[4], dmin[4] | scales[64] (row k's 16-element group j at 4j + k, the byte
// unchanged) | qs[256] (r4_crumbs).
void from_q2_k_r4(const uint8_t* src, BlockQ2_K* const rows[4], int64_t ibl) {
  const uint8_t* scales = src + 16;
  const uint8_t* qs = src + 80;
  for (int k = 0; k < 4; ++k) {
    BlockQ2_K& b = rows[k][ibl];
    std::memcpy(&b.d, src + 2 * k, 2);
    std::memcpy(&b.dmin, src + 8 + 2 * k, 2);
    for (int j = 0; j < 16; ++j) b.scales[j] = scales[4 * j + k];
    uint8_t level[kQK_K];
    r4_crumbs(qs, k, level);
    pack_2bit_levels(level, b.qs);
  }
}

// Q3_K_R4: fp16 d[4] | scales_h[16] | scales_l[32] | qh[128] | qs[256]. Row k's 6-bit scales
// (offset 32 kept) of groups 2ib and 2ib + 1 are r4_scale6 entries 8ib + k and 8ib + k + 4; its
// levels: r4_crumbs, third bits in kQ3High order.
void from_q3_k_r4(const uint8_t* src, BlockQ3_K* const rows[4], int64_t ibl) {
  const uint8_t* scales_h = src + 8;
  const uint8_t* scales_l = src + 24;
  const uint8_t* qh = src + 56;
  const uint8_t* qs = src + 184;
  for (int k = 0; k < 4; ++k) {
    BlockQ3_K& b = rows[k][ibl];
    std::memcpy(&b.d, src + 2 * k, 2);
    // Q3_K: scale j's low 4 bits in nibble j / 8 of byte j % 8, high 2 at bits 2 (j / 4) of byte 8 + j % 4.
    std::memset(b.scales, 0, sizeof(b.scales));
    for (int j = 0; j < 16; ++j) {
      const uint8_t s = r4_scale6(scales_l, scales_h, 8 * (j / 2) + k + 4 * (j % 2));
      b.scales[j % 8] |= static_cast<uint8_t>((s & 0x0F) << (4 * (j / 8)));
      b.scales[8 + j % 4] |= static_cast<uint8_t>((s >> 4) << (2 * (j / 4)));
    }
    uint8_t level[kQK_K];
    r4_crumbs(qs, k, level);
    r4_high_bits(qh, k, kQ3High, 2, level);
    pack_2bit_levels(level, b.qs);
    pack_third_bits(level, b.hmask);
  }
}

// Q4_K_R4 / Q5_K_R4 scales: row k's sub-block ib is entry s = 4ib + k: scales_l[s] holds the low
// nibbles of its scale and min, scales_h[s % 16] their high 2 bits each (scale bits 0-1, min
// bits 2-3, shifted by 4 (s / 16)).
void k4_r4_scales(const uint8_t* scales_h, const uint8_t* scales_l, int k, uint8_t packed[12]) {
  uint8_t sc[8], mn[8];
  for (int ib = 0; ib < 8; ++ib) {
    const int s = 4 * ib + k;
    const int h = scales_h[s % 16] >> (4 * (s / 16));
    sc[ib] = static_cast<uint8_t>((scales_l[s] & 0x0F) | (h & 3) << 4);
    mn[ib] = static_cast<uint8_t>((scales_l[s] >> 4) | ((h >> 2) & 3) << 4);
  }
  quant::pack_k4_scales(sc, mn, packed);
}

// Q4_K_R4: fp16 d[4], dmin[4] | scales_h[16] | scales_l[32] | qs[512] (r4_nibbles).
void from_q4_k_r4(const uint8_t* src, BlockQ4_K* const rows[4], int64_t ibl) {
  for (int k = 0; k < 4; ++k) {
    BlockQ4_K& b = rows[k][ibl];
    std::memcpy(&b.d, src + 2 * k, 2);
    std::memcpy(&b.dmin, src + 8 + 2 * k, 2);
    k4_r4_scales(src + 16, src + 32, k, b.scales);
    uint8_t level[kQK_K];
    r4_nibbles(src + 64, k, level);
    // Q4_K: element 64j + l in the low nibble of qs[32j + l], element 64j + 32 + l in the high one.
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 32; ++l)
        b.qs[32 * j + l] = static_cast<uint8_t>(level[64 * j + l] | level[64 * j + 32 + l] << 4);
  }
}

// Q5_K_R4: Q4_K_R4's header | qh[128] (fifth bits in kQ5High order) | qs[512] (r4_nibbles).
void from_q5_k_r4(const uint8_t* src, BlockQ5_K* const rows[4], int64_t ibl) {
  for (int k = 0; k < 4; ++k) {
    BlockQ5_K& b = rows[k][ibl];
    std::memcpy(&b.d, src + 2 * k, 2);
    std::memcpy(&b.dmin, src + 8 + 2 * k, 2);
    k4_r4_scales(src + 16, src + 32, k, b.scales);
    uint8_t level[kQK_K];
    r4_nibbles(src + 192, k, level);
    r4_high_bits(src + 64, k, kQ5High, 4, level);
    pack_5bit_levels(level, b.qs, b.qh);
  }
}

// Q6_K_R4: fp16 d[4] | int8 scales[64] | qh[256] | ql[512]. Row k's 16-element scales 2ib, 2ib+1
// at 8ib + k and 8ib + k + 4. Its 6-bit levels: low nibbles as r4_nibbles; high 2 bits of
// elements i + {0, 8, 4, 12} (bits 0-1, 2-3, 4-5, 6-7) in qh[32ib + 4k + i], of i + {16, 24, 20, 28}
// in qh[32ib + 4k + i + 16].
void from_q6_k_r4(const uint8_t* src, BlockQ6_K* const rows[4], int64_t ibl) {
  const auto* scales = reinterpret_cast<const int8_t*>(src + 8);
  const uint8_t* qh = src + 8 + 64;
  const uint8_t* ql = qh + 256;
  constexpr int kHigh[2][4] = {{0, 8, 4, 12}, {16, 24, 20, 28}};
  for (int k = 0; k < 4; ++k) {
    BlockQ6_K& b = rows[k][ibl];
    std::memcpy(&b.d, src + 2 * k, 2);
    uint8_t level[kQK_K];
    r4_nibbles(ql, k, level);
    for (int ib = 0; ib < 8; ++ib) {
      b.scales[2 * ib] = scales[8 * ib + k];
      b.scales[2 * ib + 1] = scales[8 * ib + k + 4];
      for (int i = 0; i < 4; ++i)
        for (int half = 0; half < 2; ++half) {
          const uint8_t h = qh[32 * ib + 4 * k + i + 16 * half];
          for (int f = 0; f < 4; ++f)
            level[32 * ib + kHigh[half][f] + i] |= static_cast<uint8_t>(((h >> (2 * f)) & 3) << 4);
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

}  // namespace

void q2_k_r4(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  by_block_column<BlockQ2_K, 4>(from_q2_k_r4, kQK_K, src, n_rows, n_cols, dst);
}
void q3_k_r4(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  by_block_column<BlockQ3_K, 4>(from_q3_k_r4, kQK_K, src, n_rows, n_cols, dst);
}
void q4_k_r4(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  by_block_column<BlockQ4_K, 4>(from_q4_k_r4, kQK_K, src, n_rows, n_cols, dst);
}
void q5_k_r4(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  by_block_column<BlockQ5_K, 4>(from_q5_k_r4, kQK_K, src, n_rows, n_cols, dst);
}
void q6_k_r4(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  by_block_column<BlockQ6_K, 4>(from_q6_k_r4, kQK_K, src, n_rows, n_cols, dst);
}

}  // namespace mla::interleaved
