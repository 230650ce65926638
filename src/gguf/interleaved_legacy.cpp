// ik_llama.cpp's interleaved forms of the 32-element block types (Q4_0_R8, Q5_0_R4, Q6_0_R4,
// Q8_0_R8, IQ4_NL_R4, MXFP4_R8), of Q8_K (Q8_K_R8, Q8_K_R16, read as Q8_0) and of BF16
// (BF16_R16). Layouts: ik's ggml-common.h and repack_* functions; the inverses are ours.
#include <cstring>

#include "gguf/interleaved_families.h"

namespace mla::interleaved {
namespace {

using quant::BlockIQ4_NL;
using quant::BlockMXFP4;
using quant::BlockQ4_0;
using quant::BlockQ5_0;
using quant::BlockQ6_0;
using quant::BlockQ8_0;
using quant::kQK;
using quant::kQK_K;

// Q4_0_R8: fp16 d[8] | qs[128]: bytes 4l..4l+3 of row k's qs at 32l + 4k (l = 0..3). MXFP4_R8 is
// the same with an E8M0 exponent byte e[8] in place of d.
template <typename Block, int kScaleBytes>
void from_nibbles_r8(const uint8_t* src, Block* const rows[8], int64_t ib) {
  const uint8_t* qs = src + 8 * kScaleBytes;
  for (int k = 0; k < 8; ++k) {
    Block& b = rows[k][ib];
    std::memcpy(&b, src + kScaleBytes * k, kScaleBytes);
    for (int l = 0; l < 4; ++l)
      for (int i = 0; i < 4; ++i) b.qs[4 * l + i] = qs[32 * l + 4 * k + i];
  }
}

// Q8_0_R8: fp16 d[8] | qs[256]: quants 4l..4l+3 of row k at 32l + 4k, quants 16+4l.. at 128 + 32l + 4k.
void from_q8_0_r8(const uint8_t* src, BlockQ8_0* const rows[8], int64_t ib) {
  const auto* qs = reinterpret_cast<const int8_t*>(src + 16);
  for (int k = 0; k < 8; ++k) {
    BlockQ8_0& b = rows[k][ib];
    std::memcpy(&b.d, src + 2 * k, 2);
    for (int l = 0; l < 4; ++l)
      for (int i = 0; i < 4; ++i) {
        b.qs[4 * l + i] = qs[32 * l + 4 * k + i];
        b.qs[16 + 4 * l + i] = qs[128 + 32 * l + 4 * k + i];
      }
  }
}

// Row k's 32 levels of a 4-row block whose low nibbles sit as in r4_nibbles (one sub-block:
// element kR4First[l] + 8h + i in nibble h of qs[4k + i + 16l]).
void r4_block_nibbles(const uint8_t* qs, int k, uint8_t level[kQK]) {
  for (int l = 0; l < 4; ++l)
    for (int i = 0; i < 4; ++i) {
      const uint8_t q = qs[4 * k + i + 16 * l];
      level[kR4First[l] + i] = q & 0x0F;
      level[kR4First[l] + 8 + i] = q >> 4;
    }
}

// Q5_0_R4: fp16 d[4] | qh[16] | qs[64]. Low nibbles as r4_block_nibbles; the fifth bit of
// element kR4First[l] + 8h + i at bit l + 4h of qh[4k + i].
void from_q5_0_r4(const uint8_t* src, BlockQ5_0* const rows[4], int64_t ib) {
  const uint8_t* qh = src + 8;
  const uint8_t* qs = src + 24;
  for (int k = 0; k < 4; ++k) {
    uint8_t level[kQK];
    r4_block_nibbles(qs, k, level);
    uint32_t high = 0;  // Q5_0: bit j = fifth bit of element j
    for (int l = 0; l < 4; ++l)
      for (int i = 0; i < 4; ++i)
        for (int h = 0; h < 2; ++h)
          high |= static_cast<uint32_t>((qh[4 * k + i] >> (l + 4 * h)) & 1) << (kR4First[l] + 8 * h + i);
    BlockQ5_0& b = rows[k][ib];
    std::memcpy(&b.d, src + 2 * k, 2);
    std::memcpy(b.qh, &high, 4);
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(level[j] | level[j + 16] << 4);
  }
}

// Q6_0_R4: fp16 d[4] | qh[32] | qs[64] per 32 columns. Low nibbles as r4_block_nibbles; the high
// 2 bits of element kR4First[l] + 8h + i at bits 2 (l / 2) + 4h of qh[4k + i + 16 (l % 2)].
void from_q6_0_r4(const uint8_t* src, BlockQ6_0* const rows[4], int64_t ib) {
  const uint8_t* qh = src + 8;
  const uint8_t* qs = src + 40;
  for (int k = 0; k < 4; ++k) {
    uint8_t level[kQK];
    r4_block_nibbles(qs, k, level);
    for (int l = 0; l < 4; ++l)
      for (int i = 0; i < 4; ++i)
        for (int h = 0; h < 2; ++h) {
          const uint8_t hi = (qh[4 * k + i + 16 * (l % 2)] >> (2 * (l / 2) + 4 * h)) & 3;
          level[kR4First[l] + 8 * h + i] |= static_cast<uint8_t>(hi << 4);
        }
    // Q6_0: element j < 16 in the low nibble of qs[j], j + 16 in the high one; their high 2 bits
    // at bits 4 (j / 8) and 4 (j / 8) + 2 of qh[j % 8].
    BlockQ6_0& b = rows[k][ib];
    std::memcpy(&b.d, src + 2 * k, 2);
    std::memset(b.qh, 0, sizeof(b.qh));
    for (int j = 0; j < 16; ++j) {
      b.qs[j] = static_cast<uint8_t>((level[j] & 0x0F) | (level[j + 16] & 0x0F) << 4);
      b.qh[j % 8] |= static_cast<uint8_t>(((level[j] >> 4) | (level[j + 16] >> 4) << 2) << (4 * (j / 8)));
    }
  }
}

// IQ4_NL_R4: fp16 d[4] | qs[64]. Row k's IQ4_NL bytes q[0..15] (element j low nibble of q[j],
// j + 16 high): r = qs + 4k + i holds q[i] (low nibbles) and q[i + 8] (high nibbles) split over
// r[0] (their low nibbles) and r[16] (their high ones); q[i + 4], q[i + 12] likewise over r[32],
// r[48].
void from_iq4_nl_r4(const uint8_t* src, BlockIQ4_NL* const rows[4], int64_t ib) {
  const uint8_t* qs = src + 8;
  for (int k = 0; k < 4; ++k) {
    BlockIQ4_NL& b = rows[k][ib];
    std::memcpy(&b.d, src + 2 * k, 2);
    for (int i = 0; i < 4; ++i)
      for (int half = 0; half < 2; ++half) {
        const uint8_t lo = qs[4 * k + i + 32 * half], hi = qs[4 * k + i + 32 * half + 16];
        b.qs[i + 4 * half] = static_cast<uint8_t>((lo & 0x0F) | (hi & 0x0F) << 4);
        b.qs[i + 4 * half + 8] = static_cast<uint8_t>((lo >> 4) | (hi & 0xF0));
      }
  }
}

// Q8_K_R8 / Q8_K_R16 (R rows): per 256 columns fp16 d[R] | qs[256 R], quants 4j..4j+3 of row k at
// 4 (R j + k). One fp16 scale per 256 elements is exact as eight Q8_0 blocks with that scale.
// Q8_K_R16 holds each quant plus 128 as an unsigned byte (ik's dequantization: d q - 128 d; its
// quantizer adds the 128 only in an AVX-512 VNNI build, the only one whose files read right).
template <int R>
void q8_k_rows(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  const int64_t nb = n_cols / kQK_K;
  constexpr int64_t kGroupBytes = R * (2 + kQK_K);
  constexpr uint8_t kFlip = R == 16 ? 0x80 : 0;
  for (int64_t g = 0; g < n_rows / R; ++g)
    for (int64_t ibl = 0; ibl < nb; ++ibl) {
      const uint8_t* blk = src + (g * nb + ibl) * kGroupBytes;
      const uint8_t* qs = blk + 2 * R;
      for (int k = 0; k < R; ++k) {
        auto* out = reinterpret_cast<BlockQ8_0*>(dst) + (g * R + k) * (n_cols / kQK) + ibl * (kQK_K / kQK);
        for (int j = 0; j < kQK_K / 4; ++j) {
          BlockQ8_0& b = out[j / 8];
          if (j % 8 == 0) std::memcpy(&b.d, blk + 2 * k, 2);
          for (int i = 0; i < 4; ++i) b.qs[4 * (j % 8) + i] = static_cast<int8_t>(qs[4 * (R * j + k) + i] ^ kFlip);
        }
      }
    }
}

}  // namespace

void q4_0_r8(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  by_block_column<BlockQ4_0, 8>(from_nibbles_r8<BlockQ4_0, 2>, kQK, src, n_rows, n_cols, dst);
}
void mxfp4_r8(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  by_block_column<BlockMXFP4, 8>(from_nibbles_r8<BlockMXFP4, 1>, kQK, src, n_rows, n_cols, dst);
}
void q5_0_r4(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  by_block_column<BlockQ5_0, 4>(from_q5_0_r4, kQK, src, n_rows, n_cols, dst);
}
void q6_0_r4(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  by_block_column<BlockQ6_0, 4>(from_q6_0_r4, kQK, src, n_rows, n_cols, dst);
}
void q8_0_r8(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  by_block_column<BlockQ8_0, 8>(from_q8_0_r8, kQK, src, n_rows, n_cols, dst);
}
void iq4_nl_r4(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  by_block_column<BlockIQ4_NL, 4>(from_iq4_nl_r4, kQK, src, n_rows, n_cols, dst);
}
void q8_k_r8(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  q8_k_rows<8>(src, n_rows, n_cols, dst);
}
void q8_k_r16(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  q8_k_rows<16>(src, n_rows, n_cols, dst);
}

// BF16_R16: each group of 16 rows is n_cols pairs: pair j of row k (elements 2j, 2j + 1) at
// 2 (16 j + k). n_cols is even.
void bf16_r16(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  for (int64_t g = 0; g < n_rows / 16; ++g) {
    const uint8_t* group = src + g * 16 * n_cols * 2;
    for (int k = 0; k < 16; ++k) {
      uint8_t* row = dst + (g * 16 + k) * n_cols * 2;
      for (int64_t j = 0; j < n_cols / 2; ++j) std::memcpy(row + 4 * j, group + 4 * (16 * j + k), 4);
    }
  }
}

}  // namespace mla::interleaved
