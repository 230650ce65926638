// Packed 16-row weight groups (see packed.h): the packers (run once at load), the activation
// extras, the scalar reference GEMM (bit-identical to the AVX-512 and AVX2 kernels) and the dispatch.
#include <cmath>
#include <cstring>

#include "quant/kernel_choice.h"
#include "quant/kernels.h"
#include "quant/packed.h"
#include "quant/packed_iq.h"
#include "quant/packed_iqk.h"
#include "util/ggml_blocks.h"

MLA_NO_FP_CONTRACT

namespace mla {

namespace {

using namespace quant;

void pack_q8_0(const uint8_t* src, int64_t row_bytes, int64_t n_cols, uint8_t* dst) {
  for (int64_t b = 0; b < n_cols / kQK; ++b) {
    uint8_t* out = dst + b * kQ8x16Bytes;
    for (int r = 0; r < kPackedRows; ++r) {
      const auto& blk = reinterpret_cast<const BlockQ8_0*>(src + r * row_bytes)[b];
      std::memcpy(out + 2 * r, &blk.d, 2);
      for (int g = 0; g < kQK / 4; ++g) {
        uint32_t four;  // q + 128 for four bytes at once: flipping the sign bit of each
        std::memcpy(&four, blk.qs + 4 * g, 4);
        four ^= 0x80808080u;
        std::memcpy(out + kQ8x16Quants + 64 * g + 4 * r, &four, 4);
      }
    }
  }
}

// Q4_K and Q5_K share the scales, mins and nibbles (BlockQ5_K adds qh before qs); Q5_K's fifth
// bits follow as their own plane: entry g, row r holds qh[4g..4g+3] of the row's block, whose bit
// s is the fifth bit of column 32s + 4g + i.
template <typename Block, int64_t kBytes>
void pack_q45_k(const uint8_t* src, int64_t row_bytes, int64_t n_cols, uint8_t* dst) {
  for (int64_t b = 0; b < n_cols / kQK_K; ++b) {
    uint8_t* out = dst + b * kBytes;
    for (int r = 0; r < kPackedRows; ++r) {
      const auto& blk = reinterpret_cast<const Block*>(src + r * row_bytes)[b];
      if constexpr (kBytes == kQ5Kx16Bytes)
        for (int g = 0; g < 8; ++g) std::memcpy(out + kQ5Kx16High + 64 * g + 4 * r, blk.qh + 4 * g, 4);
      std::memcpy(out + 2 * r, &blk.d, 2);
      std::memcpy(out + kQ4Kx16Dmin + 2 * r, &blk.dmin, 2);
      uint8_t sc[8], mn[8];
      unpack_k4_scales(blk.scales, sc, mn);
      for (int s = 0; s < 8; ++s) {
        out[kQ4Kx16Scales + 16 * s + r] = sc[s];
        out[kQ4Kx16Mins + 32 * (s / 2) + 2 * r + s % 2] = mn[s];
      }
      // Q4_K: qs[32c + l] holds column 64c + l (low nibble) and 64c + 32 + l (high nibble).
      for (int c = 0; c < 4; ++c)
        for (int g = 0; g < 8; ++g)
          std::memcpy(out + kQ4Kx16Quants + 512 * c + 64 * g + 4 * r, blk.qs + 32 * c + 4 * g, 4);
    }
  }
}

void pack_q6_k(const uint8_t* src, int64_t row_bytes, int64_t n_cols, uint8_t* dst) {
  std::memset(dst, 0, static_cast<size_t>(n_cols / kQK_K * kQ6Kx16Bytes));
  for (int64_t b = 0; b < n_cols / kQK_K; ++b) {
    uint8_t* out = dst + b * kQ6Kx16Bytes;
    for (int r = 0; r < kPackedRows; ++r) {
      const auto& blk = reinterpret_cast<const BlockQ6_K*>(src + r * row_bytes)[b];
      std::memcpy(out + 2 * r, &blk.d, 2);
      for (int j = 0; j < 16; ++j) out[kQ6Kx16Scales + 16 * j + r] = static_cast<uint8_t>(blk.scales[j]);
      uint8_t q[kQK_K];
      q6_k_levels(blk, q);
      for (int c = 0; c < kQK_K; ++c) {
        const int k = c / 4, i = c % 4;
        out[kQ6Kx16Nibbles + 64 * (k % 32) + 4 * r + i] |= static_cast<uint8_t>((q[c] & 0x0F) << (4 * (k / 32)));
        out[kQ6Kx16Bits + 64 * (k % 16) + 4 * r + i] |= static_cast<uint8_t>((q[c] >> 4) << (2 * (k / 16)));
      }
    }
  }
}

// Q2_K / Q3_K: the 2-bit levels of element e sit at bits 2s..2s+1 of qs[32h + l] (e = 128h + 32s +
// l); Q3_K's high bit of element e is bit e / 32 of hmask[e % 32].
int q23_low_bits(const uint8_t* qs, int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3; }

void pack_q2_k(const uint8_t* src, int64_t row_bytes, int64_t n_cols, uint8_t* dst) {
  std::memset(dst, 0, static_cast<size_t>(n_cols / kQK_K * kQ2Kx16Bytes));
  for (int64_t b = 0; b < n_cols / kQK_K; ++b) {
    uint8_t* out = dst + b * kQ2Kx16Bytes;
    for (int r = 0; r < kPackedRows; ++r) {
      const auto& blk = reinterpret_cast<const BlockQ2_K*>(src + r * row_bytes)[b];
      std::memcpy(out + 2 * r, &blk.d, 2);
      std::memcpy(out + kQ2Kx16Dmin + 2 * r, &blk.dmin, 2);
      for (int j = 0; j < 16; ++j) out[kQ2Kx16Scales + 32 * (j / 2) + 2 * r + j % 2] = blk.scales[j];
      for (int c = 0; c < kQK_K; ++c) {
        const int k = c / 4;
        out[kQ2Kx16Quants + 64 * (k % 16) + 4 * r + c % 4] |=
            static_cast<uint8_t>(q23_low_bits(blk.qs, c) << (2 * (k / 16)));
      }
    }
  }
}

void pack_q3_k(const uint8_t* src, int64_t row_bytes, int64_t n_cols, uint8_t* dst) {
  std::memset(dst, 0, static_cast<size_t>(n_cols / kQK_K * kQ3Kx16Bytes));
  for (int64_t b = 0; b < n_cols / kQK_K; ++b) {
    uint8_t* out = dst + b * kQ3Kx16Bytes;
    for (int r = 0; r < kPackedRows; ++r) {
      const auto& blk = reinterpret_cast<const BlockQ3_K*>(src + r * row_bytes)[b];
      std::memcpy(out + 2 * r, &blk.d, 2);
      int8_t sc[16];
      unpack_q3_k_scales(blk.scales, sc);
      for (int j = 0; j < 16; ++j) out[kQ3Kx16Scales + 16 * j + r] = static_cast<uint8_t>(sc[j]);
      for (int c = 0; c < kQK_K; ++c) {
        const int k = c / 4, i = c % 4;
        out[kQ3Kx16Quants + 64 * (k % 16) + 4 * r + i] |=
            static_cast<uint8_t>(q23_low_bits(blk.qs, c) << (2 * (k / 16)));
        out[kQ3Kx16High + 64 * (k % 8) + 4 * r + i] |=
            static_cast<uint8_t>(((blk.hmask[c % 32] >> (c / 32)) & 1) << (k / 8));
      }
    }
  }
}

// Activation sums over the quants of a Q8_0 or Q8_K row.
int32_t sum_i8(const int8_t* q, int n) {
  int32_t s = 0;
  for (int i = 0; i < n; ++i) s += q[i];
  return s;
}

// The loops every scalar twin shares: per token and row one float accumulator, carried through
// step(block bytes, activation block, row, acc) over the blocks in order.
template <typename ActBlock, int64_t kBlockElems, int64_t kBlockBytes, typename Step>
void gemm_ref(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, int n_tok, float* out,
              Step step) {
  for (int t = 0; t < n_tok; ++t) {
    const auto* a = reinterpret_cast<const ActBlock*>(act + t * act_stride);
    for (int r = 0; r < kPackedRows; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < n_cols / kBlockElems; ++b) acc = step(group + b * kBlockBytes, a[b], r, acc);
      out[t * kPackedRows + r] = acc;
    }
  }
}

inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}

void gemm_q8_0_ref(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, int n_tok,
                   float* out) {
  gemm_ref<BlockQ8_0, kQK, kQ8x16Bytes>(
      n_cols, group, act, act_stride, n_tok, out, [](const uint8_t* blk, const BlockQ8_0& a, int r, float acc) {
        int32_t isum = -128 * sum_i8(a.qs, kQK);
        for (int k = 0; k < kQK; ++k) isum += blk[kQ8x16Quants + (k / 4) * 64 + 4 * r + k % 4] * a.qs[k];
        return std::fma(half_at(blk + 2 * r) * fp16_to_fp32(a.d), static_cast<float>(isum), acc);
      });
}

// Q4_K (kBytes = kQ4Kx16Bytes) and Q5_K (kQ5Kx16Bytes: levels 0..31 with the fifth-bit plane).
template <int64_t kBytes>
void gemm_q45_k_ref(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, int n_tok,
                    float* out) {
  gemm_ref<BlockQ8_K, kQK_K, kBytes>(
      n_cols, group, act, act_stride, n_tok, out, [](const uint8_t* blk, const BlockQ8_K& a, int r, float acc) {
        int32_t tot = 0, msum = 0;
        for (int s = 0; s < 8; ++s) {
          int32_t isum = 0;
          for (int k = 0; k < 32; ++k) {  // chunk s / 2, high nibble when s is odd
            const uint8_t byte = blk[kQ4Kx16Quants + 512 * (s / 2) + 64 * (k / 4) + 4 * r + k % 4];
            int level = (s % 2 ? byte >> 4 : byte) & 0x0F;
            if constexpr (kBytes == kQ5Kx16Bytes)
              level |= ((blk[kQ5Kx16High + 64 * (k / 4) + 4 * r + k % 4] >> s) & 1) << 4;
            isum += level * a.qs[32 * s + k];
          }
          tot += blk[kQ4Kx16Scales + 16 * s + r] * isum;
          msum += blk[kQ4Kx16Mins + 32 * (s / 2) + 2 * r + s % 2] * sum_i8(a.qs + 32 * s, 32);
        }
        acc = std::fma(half_at(blk + 2 * r) * a.d, static_cast<float>(tot), acc);
        return std::fma(-(half_at(blk + kQ4Kx16Dmin + 2 * r) * a.d), static_cast<float>(msum), acc);
      });
}

void gemm_q6_k_ref(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, int n_tok,
                   float* out) {
  gemm_ref<BlockQ8_K, kQK_K, kQ6Kx16Bytes>(
      n_cols, group, act, act_stride, n_tok, out, [](const uint8_t* blk, const BlockQ8_K& a, int r, float acc) {
        int32_t tot = 0;
        for (int j = 0; j < 16; ++j) {  // 16 columns per scale
          int32_t isum = -32 * sum_i8(a.qs + 16 * j, 16);
          for (int c = 16 * j; c < 16 * j + 16; ++c) {
            const int k = c / 4, i = c % 4;
            const int lo = (blk[kQ6Kx16Nibbles + 64 * (k % 32) + 4 * r + i] >> (4 * (k / 32))) & 0x0F;
            const int hi = (blk[kQ6Kx16Bits + 64 * (k % 16) + 4 * r + i] >> (2 * (k / 16))) & 3;
            isum += (lo | hi << 4) * a.qs[c];
          }
          tot += static_cast<int8_t>(blk[kQ6Kx16Scales + 16 * j + r]) * isum;
        }
        return std::fma(half_at(blk + 2 * r) * a.d, static_cast<float>(tot), acc);
      });
}

// The 2-bit level of column c of row r in a Q2_Kx16 / Q3_Kx16 plane.
int plane2(const uint8_t* plane, int r, int c) {
  const int k = c / 4;
  return (plane[64 * (k % 16) + 4 * r + c % 4] >> (2 * (k / 16))) & 3;
}

void gemm_q2_k_ref(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, int n_tok,
                   float* out) {
  gemm_ref<BlockQ8_K, kQK_K, kQ2Kx16Bytes>(
      n_cols, group, act, act_stride, n_tok, out, [](const uint8_t* blk, const BlockQ8_K& a, int r, float acc) {
        int32_t tot = 0, msum = 0;
        for (int j = 0; j < 16; ++j) {
          int32_t isum = 0;
          for (int c = 16 * j; c < 16 * j + 16; ++c) isum += plane2(blk + kQ2Kx16Quants, r, c) * a.qs[c];
          const uint8_t sc = blk[kQ2Kx16Scales + 32 * (j / 2) + 2 * r + j % 2];
          tot += (sc & 0x0F) * isum;
          msum += (sc >> 4) * sum_i8(a.qs + 16 * j, 16);
        }
        acc = std::fma(half_at(blk + 2 * r) * a.d, static_cast<float>(tot), acc);
        return std::fma(-(half_at(blk + kQ2Kx16Dmin + 2 * r) * a.d), static_cast<float>(msum), acc);
      });
}

void gemm_q3_k_ref(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, int n_tok,
                   float* out) {
  gemm_ref<BlockQ8_K, kQK_K, kQ3Kx16Bytes>(
      n_cols, group, act, act_stride, n_tok, out, [](const uint8_t* blk, const BlockQ8_K& a, int r, float acc) {
        int32_t tot = 0;
        for (int j = 0; j < 16; ++j) {
          int32_t isum = 0;
          for (int c = 16 * j; c < 16 * j + 16; ++c) {
            const int k = c / 4;
            const int high = (blk[kQ3Kx16High + 64 * (k % 8) + 4 * r + c % 4] >> (k / 8)) & 1;
            isum += (plane2(blk + kQ3Kx16Quants, r, c) - (high ? 0 : 4)) * a.qs[c];
          }
          tot += static_cast<int8_t>(blk[kQ3Kx16Scales + 16 * j + r]) * isum;
        }
        return std::fma(half_at(blk + 2 * r) * a.d, static_cast<float>(tot), acc);
      });
}

}  // namespace

bool packed_layout_exists(GgmlType t) { return packed_gemm_ref_fn(t) != nullptr; }

int64_t packed_group_bytes(GgmlType t, int64_t n_cols) {
  switch (t) {
    case GgmlType::Q8_0:
      return n_cols / kQK * kQ8x16Bytes;
    case GgmlType::Q2_K:
      return n_cols / kQK_K * kQ2Kx16Bytes;
    case GgmlType::Q3_K:
      return n_cols / kQK_K * kQ3Kx16Bytes;
    case GgmlType::Q4_K:
      return n_cols / kQK_K * kQ4Kx16Bytes;
    case GgmlType::Q5_K:
      return n_cols / kQK_K * kQ5Kx16Bytes;
    case GgmlType::Q6_K:
      return n_cols / kQK_K * kQ6Kx16Bytes;
    default:
      if (iq_packed_spec(t).n_scales) return packed_iq_group_bytes(t, n_cols);
      if (iqk_packed(t)) return packed_iqk_group_bytes(t, n_cols);
      return packed_nibble_group_bytes(t, n_cols);
  }
}

void pack_rows(GgmlType t, const uint8_t* src, int64_t row_bytes, int64_t n_cols, uint8_t* dst) {
  switch (t) {
    case GgmlType::Q8_0:
      return pack_q8_0(src, row_bytes, n_cols, dst);
    case GgmlType::Q2_K:
      return pack_q2_k(src, row_bytes, n_cols, dst);
    case GgmlType::Q3_K:
      return pack_q3_k(src, row_bytes, n_cols, dst);
    case GgmlType::Q4_K:
      return pack_q45_k<BlockQ4_K, kQ4Kx16Bytes>(src, row_bytes, n_cols, dst);
    case GgmlType::Q5_K:
      return pack_q45_k<BlockQ5_K, kQ5Kx16Bytes>(src, row_bytes, n_cols, dst);
    case GgmlType::Q6_K:
      return pack_q6_k(src, row_bytes, n_cols, dst);
    default:
      if (iq_packed_spec(t).n_scales) return pack_iq_rows(t, src, row_bytes, n_cols, dst);
      if (iqk_packed(t)) return pack_iqk_rows(t, src, row_bytes, n_cols, dst);
      return pack_nibble_rows(t, src, row_bytes, n_cols, dst);
  }
}

int64_t packed_act_extra_bytes(GgmlType act_type, int64_t n_cols) {
  if (act_type == GgmlType::Q8_0) return n_cols / kQK * 4;
  if (act_type == GgmlType::Q8_K) return n_cols / kQK_K * (kQ8KExtraPairs + kQ8KExtraNeg32 + kQ8KExtraNeg128);
  return 0;
}

void packed_act_extra(GgmlType act_type, const void* act_row, int64_t n_cols, void* extra) {
  if (act_type == GgmlType::Q8_0) {
    const auto* a = static_cast<const BlockQ8_0*>(act_row);
    // The extras follow the quantized row and may be unaligned: stored byte-wise.
    auto* out = static_cast<uint8_t*>(extra);
    for (int64_t b = 0; b < n_cols / kQK; ++b) {
      const int32_t v = -128 * sum_i8(a[b].qs, kQK);
      std::memcpy(out + 4 * b, &v, sizeof v);
    }
  } else if (act_type == GgmlType::Q8_K) {
    const auto* a = static_cast<const BlockQ8_K*>(act_row);
    const int64_t nb = n_cols / kQK_K;
    auto* pairs = static_cast<uint8_t*>(extra);
    uint8_t* neg32 = pairs + nb * kQ8KExtraPairs;
    uint8_t* neg128 = neg32 + nb * kQ8KExtraNeg32;
    for (int64_t b = 0; b < nb; ++b) {
      for (int s = 0; s < 8; ++s) {
        const auto v = static_cast<int16_t>(a[b].bsums[2 * s] + a[b].bsums[2 * s + 1]);
        std::memcpy(pairs + 2 * (8 * b + s), &v, sizeof v);
      }
      for (int j = 0; j < 16; ++j) {
        const int32_t v = -32 * a[b].bsums[j], w = -128 * a[b].bsums[j];
        std::memcpy(neg32 + 4 * (16 * b + j), &v, sizeof v);
        std::memcpy(neg128 + 4 * (16 * b + j), &w, sizeof w);
      }
    }
  }
}

PackedGemmFn packed_gemm_ref_fn(GgmlType t) {
  if (t == GgmlType::Q8_0) return gemm_q8_0_ref;
  if (t == GgmlType::Q2_K) return gemm_q2_k_ref;
  if (t == GgmlType::Q3_K) return gemm_q3_k_ref;
  if (t == GgmlType::Q4_K) return gemm_q45_k_ref<kQ4Kx16Bytes>;
  if (t == GgmlType::Q5_K) return gemm_q45_k_ref<kQ5Kx16Bytes>;
  if (t == GgmlType::Q6_K) return gemm_q6_k_ref;
  if (PackedGemmFn f = packed_gemm_iq_ref_fn(t)) return f;
  if (PackedGemmFn f = packed_gemm_iqk_ref_fn(t)) return f;
  return packed_gemm_nibble_ref_fn(t);
}

const char* packed_gemm_family() {
  if (!kernel_choice().repack) return "none";
  if (quant::cpu_has_avx512_vnni()) return "avx512";
  if (quant::cpu_has_avx2_fma()) return "avx2";
  return "none";
}

PackedGemmFn packed_gemm_fn(GgmlType t) {
  if (!kernel_choice().repack) return nullptr;
  if (quant::cpu_has_avx512_vnni()) return quant::packed_gemm_avx512_fn(t);
  // Every AVX2 kernel beats the AVX2 row dot products in prefill and decode (mla_bench_avx2:
  // gemm/<TYPE>/{rows,packed_avx2}/t8 by 1.3-6x, gemv/<TYPE>/.../cold by 1.5-6x), so all are
  // used. Only a 1-token GEMM over cached weights is slower for Q3_K and Q6_K (0.7-0.85x); decode
  // streams its weights from memory.
  if (quant::cpu_has_avx2_fma()) return quant::packed_gemm_avx2_fn(t);
  return nullptr;
}

}  // namespace mla
