#pragma once
// Inside the interleaved-form conversion (interleaved.h): one converter per ik_llama.cpp form,
// grouped by family in interleaved_{legacy,kquants,iquants,iqk}.cpp, and the helpers they share.
// A converter takes n_rows rows of n_cols elements in its form (n_rows a multiple of the group,
// n_cols of the base block, both checked by deinterleave_rows) and writes the same rows in the
// base type.
#include <cstdint>
#include <cstring>

#include "util/ggml_blocks.h"

namespace mla::interleaved {

using RowsFn = void (*)(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst);

// 32-element blocks and plain rows (interleaved_legacy.cpp).
void q4_0_r8(const uint8_t*, int64_t, int64_t, uint8_t*);
void q5_0_r4(const uint8_t*, int64_t, int64_t, uint8_t*);
void q6_0_r4(const uint8_t*, int64_t, int64_t, uint8_t*);
void q8_0_r8(const uint8_t*, int64_t, int64_t, uint8_t*);
void iq4_nl_r4(const uint8_t*, int64_t, int64_t, uint8_t*);
void mxfp4_r8(const uint8_t*, int64_t, int64_t, uint8_t*);
void q8_k_r8(const uint8_t*, int64_t, int64_t, uint8_t*);
void q8_k_r16(const uint8_t*, int64_t, int64_t, uint8_t*);
void bf16_r16(const uint8_t*, int64_t, int64_t, uint8_t*);
// K-quants (interleaved_kquants.cpp).
void q2_k_r4(const uint8_t*, int64_t, int64_t, uint8_t*);
void q3_k_r4(const uint8_t*, int64_t, int64_t, uint8_t*);
void q4_k_r4(const uint8_t*, int64_t, int64_t, uint8_t*);
void q5_k_r4(const uint8_t*, int64_t, int64_t, uint8_t*);
void q6_k_r4(const uint8_t*, int64_t, int64_t, uint8_t*);
// Lattice i-quants and IQ4_XS (interleaved_iquants.cpp).
void iq1_s_r4(const uint8_t*, int64_t, int64_t, uint8_t*);
void iq2_xxs_r4(const uint8_t*, int64_t, int64_t, uint8_t*);
void iq2_xs_r4(const uint8_t*, int64_t, int64_t, uint8_t*);
void iq2_s_r4(const uint8_t*, int64_t, int64_t, uint8_t*);
void iq3_xxs_r4(const uint8_t*, int64_t, int64_t, uint8_t*);
void iq3_s_r4(const uint8_t*, int64_t, int64_t, uint8_t*);
void iq4_xs_r8(const uint8_t*, int64_t, int64_t, uint8_t*);
// ik_llama.cpp's own IQ*_K / IQ*_KS types (interleaved_iqk.cpp).
void iq2_k_r4(const uint8_t*, int64_t, int64_t, uint8_t*);
void iq3_k_r4(const uint8_t*, int64_t, int64_t, uint8_t*);
void iq4_k_r4(const uint8_t*, int64_t, int64_t, uint8_t*);
void iq5_k_r4(const uint8_t*, int64_t, int64_t, uint8_t*);
void iq4_ks_r4(const uint8_t*, int64_t, int64_t, uint8_t*);
void iq5_ks_r4(const uint8_t*, int64_t, int64_t, uint8_t*);

// The common shape: each group of R rows is one interleaved block per block column of the base
// type (R * sizeof(Block) bytes), the one at column ib holding block ib of every row of the group;
// one(src, rows, ib) writes block ib of the group's R rows.
template <typename Block, int R, typename One>
void by_block_column(One one, int64_t block_elems, const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  constexpr auto kGroupBytes = static_cast<int64_t>(R * sizeof(Block));
  const int64_t nb = n_cols / block_elems;
  for (int64_t g = 0; g < n_rows / R; ++g) {
    Block* rows[R];
    for (int k = 0; k < R; ++k) rows[k] = reinterpret_cast<Block*>(dst) + (g * R + k) * nb;
    const uint8_t* group = src + g * nb * kGroupBytes;
    for (int64_t ib = 0; ib < nb; ++ib) one(group + ib * kGroupBytes, rows, ib);
  }
}

// The element order of ik's 4-row super-blocks: a sub-block of 32 is read 4 elements at a time,
// byte i of row k's 4 holding element kFirst[c] + i in one place and, for 4-bit quants, element
// kFirst[c] + 8 + i in the other nibble (c = 0..3).
inline constexpr int kR4First[4] = {0, 16, 4, 20};

// Row k's 4-bit low parts: element kR4First[c] + 8h + i of sub-block ib in nibble h of
// qs[64ib + 4k + i + 16c]. Overwrites level[0..255].
inline void r4_nibbles(const uint8_t* qs, int k, uint8_t* level) {
  for (int ib = 0; ib < quant::kQK_K / quant::kQK; ++ib)
    for (int c = 0; c < 4; ++c)
      for (int i = 0; i < 4; ++i) {
        const uint8_t q = qs[64 * ib + 4 * k + i + 16 * c];
        level[32 * ib + kR4First[c] + i] = q & 0x0F;
        level[32 * ib + kR4First[c] + 8 + i] = q >> 4;
      }
}

// Row k's 2-bit low parts: element 16h + 4c + i of sub-block ib at bits 2c of
// qs[32ib + 4k + i + 16h]. Overwrites level[0..255].
inline void r4_crumbs(const uint8_t* qs, int k, uint8_t* level) {
  for (int ib = 0; ib < quant::kQK_K / quant::kQK; ++ib)
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < 4; ++i) {
        const uint8_t q = qs[32 * ib + 4 * k + i + 16 * h];
        for (int c = 0; c < 4; ++c) level[32 * ib + 16 * h + 4 * c + i] = (q >> (2 * c)) & 3;
      }
}

// Row k's high bits: bit b of qh[16ib + 4k + i] is the top bit (value 1 << shift) of element
// order[b] + i of sub-block ib.
inline void r4_high_bits(const uint8_t* qh, int k, const int order[8], int shift, uint8_t* level) {
  for (int ib = 0; ib < quant::kQK_K / quant::kQK; ++ib)
    for (int i = 0; i < 4; ++i)
      for (int b = 0; b < 8; ++b)
        level[32 * ib + order[b] + i] |= static_cast<uint8_t>(((qh[16 * ib + 4 * k + i] >> b) & 1) << shift);
}

// 6-bit scale s of a 4-row super-block spread over two arrays: 4 low bits in nibble s / 32 of
// lo[s % 32], 2 high bits at bits 2 (s / 16) of hi[s % 16].
inline uint8_t r4_scale6(const uint8_t* lo, const uint8_t* hi, int s) {
  return static_cast<uint8_t>(((lo[s % 32] >> (4 * (s / 32))) & 0x0F) | ((hi[s % 16] >> (2 * (s / 16))) & 3) << 4);
}

// Base-type packers shared by several families.
// 2-bit parts (Q2_K, Q3_K, IQ2_K, IQ3_K): element 128h + 32s + l at bits 2s of qs[32h + l].
inline void pack_2bit_levels(const uint8_t* level, uint8_t* qs) {
  std::memset(qs, 0, quant::kQK_K / 4);
  for (int e = 0; e < quant::kQK_K; ++e)
    qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>((level[e] & 3) << (2 * ((e / 32) % 4)));
}
// Third bits (Q3_K's hmask, IQ3_K's qh): element e at bit e / 32 of qh[e % 32].
inline void pack_third_bits(const uint8_t* level, uint8_t* qh) {
  std::memset(qh, 0, quant::kQK_K / 8);
  for (int e = 0; e < quant::kQK_K; ++e) qh[e % 32] |= static_cast<uint8_t>(((level[e] >> 2) & 1) << (e / 32));
}
// 4-bit levels in IQ4_NL order (IQ4_K, IQ4_KS): element j of sub-block ib in the low nibble of
// qs[16ib + j], element j + 16 in the high one.
inline void pack_iq4_levels(const uint8_t* level, uint8_t* qs) {
  for (int ib = 0; ib < quant::kQK_K / quant::kQK; ++ib)
    for (int j = 0; j < 16; ++j)
      qs[16 * ib + j] = static_cast<uint8_t>(level[32 * ib + j] | level[32 * ib + j + 16] << 4);
}
// 5-bit levels as Q5_K, IQ5_K and IQ5_KS hold them: element 64m + 32h + l in nibble h of
// qs[32m + l], its fifth bit at bit 2m + h of qh[l].
inline void pack_5bit_levels(const uint8_t* level, uint8_t* qs, uint8_t* qh) {
  std::memset(qh, 0, quant::kQK_K / 8);
  for (int m = 0; m < 4; ++m)
    for (int l = 0; l < 32; ++l) {
      const uint8_t lo = level[64 * m + l], hi = level[64 * m + 32 + l];
      qs[32 * m + l] = static_cast<uint8_t>((lo & 0x0F) | (hi & 0x0F) << 4);
      qh[l] |= static_cast<uint8_t>((lo >> 4) << (2 * m) | (hi >> 4) << (2 * m + 1));
    }
}

}  // namespace mla::interleaved
