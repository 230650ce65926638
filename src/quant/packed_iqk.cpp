// Packed 16-row groups of ik_llama.cpp's IQ2_K..IQ5_K, IQ2_KS..IQ5_KS and IQ2_KL (layouts in packed_iqk.h): the packer
// (run once at load) and the scalar twin of the AVX-512 and AVX2 kernels, bit-identical to them.
#include "quant/packed_iqk.h"

#include <cmath>
#include <cstring>

#include "quant/kernels.h"

MLA_NO_FP_CONTRACT

namespace mla::quant {
namespace {

// One row's super-block in the form every type packs from: the 4-bit index of each column in
// the packed byte order (sub-block s, byte j: column 32s+j low, 32s+16+j high), the index bits
// above it (IQ5, IQ6), the extra bit of each group and the scale bytes as the layout stores them.
struct RowBlock {
  uint8_t nibbles[8][16];
  uint8_t high[8][8];  // sub-block s: the index bits above the nibble as the layout stores them
  uint8_t scale[16];   // int8 scales (16 groups) or the file's scale bytes (8 groups)
  bool extra[16];
};

// IQ5_K / IQ5_KS: the 4 low index bits of column e (per 64 columns, 32 bytes, low nibbles first)
// and the fifth bit, bit e / 32 of qh[e % 32].
void iq5_indices(const uint8_t* qs, const uint8_t* qh, RowBlock& rb) {
  std::memset(rb.high, 0, sizeof rb.high);
  for (int s = 0; s < 8; ++s)
    for (int j = 0; j < 16; ++j) {
      const int e = 32 * s + j;
      rb.nibbles[s][j] = static_cast<uint8_t>(iqk_nibble64(qs, e) | iqk_nibble64(qs, e + 16) << 4);
      const int g = j / 4, i = j % 4;
      rb.high[s][i] =
          static_cast<uint8_t>(rb.high[s][i] | ((qh[j] >> s) & 1) << g | ((qh[j + 16] >> s) & 1) << (4 + g));
    }
}

// 6-bit scales of IQ4_K / IQ5_K (offset 32) and the extra bit per 16 columns.
template <typename Block>
void k_scales(const Block& b, RowBlock& rb) {
  for (int j = 0; j < 16; ++j) {
    const int lo = (b.scales_l[j / 2] >> (4 * (j % 2))) & 0xf;
    const int hi = (b.scales_h[j / 4] >> (2 * (j % 4))) & 3;
    rb.scale[j] = static_cast<uint8_t>(static_cast<int8_t>((lo | hi << 4) - 32));
    rb.extra[j] = (b.extra >> j) & 1;
  }
}

void read_block(const BlockIQ4_K& b, RowBlock& rb) {
  std::memcpy(rb.nibbles, b.qs, sizeof rb.nibbles);  // already in the packed byte order
  k_scales(b, rb);
}
void read_block(const BlockIQ5_K& b, RowBlock& rb) {
  iq5_indices(b.qs, b.qh, rb);
  k_scales(b, rb);
}
void read_block(const BlockIQ6_K& b, RowBlock& rb) {
  std::memset(rb.high, 0, sizeof rb.high);
  for (int s = 0; s < 8; ++s)
    for (int j = 0; j < 16; ++j) {
      const int e = 32 * s + j;
      rb.nibbles[s][j] = static_cast<uint8_t>(iqk_nibble64(b.qs, e) | iqk_nibble64(b.qs, e + 16) << 4);
      for (int h = 0; h < 2; ++h)  // index bits 4-5 of column e + 16h at bits 2(j/4) of byte 4h + j%4
        rb.high[s][4 * h + j % 4] |= static_cast<uint8_t>((iqk6_index(b, e + 16 * h) >> 4) << (2 * (j / 4)));
    }
  for (int j = 0; j < 16; ++j) {
    rb.scale[j] = static_cast<uint8_t>(b.scales[j]);
    rb.extra[j] = (b.extra >> j) & 1;
  }
}
void read_block(const BlockIQ4_KS& b, RowBlock& rb) {
  std::memcpy(rb.nibbles, b.qs, sizeof rb.nibbles);
  std::memcpy(rb.scale, b.scales, 8);
}
void read_block(const BlockIQ4_KSS& b, RowBlock& rb) {
  // Per 32 columns 8 words: bit 0 of word k is bit k of the scale byte; the rest, Gray-decoded by
  // one xor with itself shifted right, are the sub-block's 16 nibble bytes.
  for (int s = 0; s < 8; ++s) {
    int ls = 0;
    for (int k = 0; k < 8; ++k) {
      const uint16_t w = b.qs[8 * s + k];
      auto v = static_cast<uint16_t>(w & 0xfffe);
      v = static_cast<uint16_t>(v ^ (v >> 1));
      rb.nibbles[s][2 * k] = static_cast<uint8_t>(v & 0xff);
      rb.nibbles[s][2 * k + 1] = static_cast<uint8_t>(v >> 8);
      ls |= (w & 1) << k;
    }
    rb.scale[s] = static_cast<uint8_t>(ls);
  }
}
void read_block(const BlockIQ5_KS& b, RowBlock& rb) {
  iq5_indices(b.qs, b.qh, rb);
  std::memcpy(rb.scale, b.scales, 8);
}

template <typename Block>
void pack(const IqkPackedSpec& sp, const uint8_t* src, int64_t row_bytes, int64_t n_cols, uint8_t* dst) {
  const int64_t head = sp.row_scaled() ? 4 : 0;  // the row's fp32 scale
  if (sp.row_scaled())
    for (int r = 0; r < kPackedRows; ++r) std::memcpy(dst + 4 * r, src + r * row_bytes, 4);
  RowBlock rb{};
  for (int64_t b = 0; b < n_cols / kQK_K; ++b) {
    uint8_t* out = dst + sp.header_bytes() + b * sp.bytes();
    std::memset(out, 0, static_cast<size_t>(sp.bytes()));
    for (int r = 0; r < kPackedRows; ++r) {
      const auto& blk = reinterpret_cast<const Block*>(src + r * row_bytes + head)[b];
      read_block(blk, rb);
      if constexpr (requires { blk.d; }) std::memcpy(out + 2 * r, &blk.d, 2);
      for (int j = 0; j < sp.n_groups; ++j) {
        out[sp.scale_offset() + 16 * j + r] = rb.scale[j];
        if (!sp.row_scaled() && rb.extra[j])
          out[sp.extra_offset() + 2 * j + r / 8] |= static_cast<uint8_t>(1 << (r % 8));
      }
      for (int s = 0; s < 8; ++s)
        for (int g = 0; g < 4; ++g) {
          std::memcpy(out + sp.quants_offset() + 256 * s + 64 * g + 4 * r, rb.nibbles[s] + 4 * g, 4);
          for (int h = 0; h < sp.high_bits; ++h)
            std::memcpy(out + sp.bits_offset() + 64 * sp.high_bits * s + 64 * h + 4 * r, rb.high[s] + 4 * h, 4);
        }
    }
  }
}

// Row r's level of column c (0..255) of a packed super-block.
int level(const IqkPackedSpec& sp, const uint8_t* blk, int r, int c) {
  const int s = c / 32, j = c % 32, g = (j % 16) / 4, i = j % 4;
  int idx = (blk[sp.quants_offset() + 256 * s + 64 * g + 4 * r + i] >> (j < 16 ? 0 : 4)) & 0x0F;
  const uint8_t* high = blk + sp.bits_offset() + 64 * sp.high_bits * s + 4 * r + i;
  if (sp.high_bits == 1) idx |= ((*high >> (j < 16 ? g : 4 + g)) & 1) << 4;
  if (sp.high_bits == 2) idx |= ((high[64 * (j / 16)] >> (2 * g)) & 3) << 4;
  bool extra;
  if (sp.row_scaled()) {
    extra = blk[sp.scale_offset() + 16 * s + r] & 1;
  } else {
    const int grp = c / 16;
    extra = (blk[sp.extra_offset() + 2 * grp + r / 8] >> (r % 8)) & 1;
  }
  return sp.table[idx] + (extra ? sp.shift : 0);
}

// Row r's integer scale of group j.
int group_scale(const IqkPackedSpec& sp, const uint8_t* blk, int r, int j) {
  const uint8_t v = blk[sp.scale_offset() + 16 * j + r];
  return sp.row_scaled() ? (v & 254) - 127 : static_cast<int8_t>(v);
}

// Row r's super-block scale: a float per row at the group's head (row-scaled types) or an fp16
// per row at the super-block's head.
float block_d(const IqkPackedSpec& sp, const uint8_t* group, const uint8_t* blk, int r) {
  if (sp.row_scaled()) {
    float d;
    std::memcpy(&d, group + 4 * r, 4);
    return d;
  }
  uint16_t h;
  std::memcpy(&h, blk + 2 * r, 2);
  return fp16_to_fp32(h);
}

// The 2- and 3-bit types (layout in packed_iqk.h): group j's extra bit and column c's index.
int extra_bit(const BlockIQ2_K& b, int j) { return (b.extra >> j) & 1; }
int extra_bit(const BlockIQ3_K& b, int j) { return (b.extra >> j) & 1; }
int extra_bit(const BlockIQ2_KS& b, int j) { return (b.extra >> j) & 1; }
int extra_bit(const BlockIQ3_KS& b, int j) { return (b.extra >> (8 + j)) & 1; }

template <typename Block>
int low_index(const Block& b, int c) {
  int idx = (b.qs[32 * (c / 128) + c % 32] >> (2 * ((c / 32) % 4))) & 3;
  if constexpr (requires { b.qh; }) idx |= ((b.qh[c % 32] >> (c / 32)) & 1) << 2;
  return idx;
}

template <typename Block>
void pack_low(const IqkLowSpec& sp, const uint8_t* src, int64_t row_bytes, int64_t n_cols, uint8_t* dst) {
  const int64_t head = sp.row_scaled() ? 2 : 0;  // the row's fp16 scale
  if (sp.row_scaled()) {
    std::memset(dst, 0, static_cast<size_t>(sp.header_bytes()));
    for (int r = 0; r < kPackedRows; ++r) std::memcpy(dst + 2 * r, src + r * row_bytes, 2);
  }
  IqkLevels u;
  for (int64_t b = 0; b < n_cols / kQK_K; ++b) {
    uint8_t* out = dst + sp.header_bytes() + b * sp.bytes();
    std::memset(out, 0, static_cast<size_t>(sp.bytes()));
    for (int r = 0; r < kPackedRows; ++r) {
      const auto& blk = reinterpret_cast<const Block*>(src + r * row_bytes + head)[b];
      if constexpr (requires { blk.d; }) std::memcpy(out + 2 * r, &blk.d, 2);
      iqk_decode(blk, u);
      for (int j = 0; j < sp.n_groups; ++j) {
        const int extra = extra_bit(blk, j);
        const int v = sp.row_scaled() ? 2 * u.scale[j] + extra : u.scale[j];
        out[sp.scale_offset() + 16 * j + r] = static_cast<uint8_t>(static_cast<int8_t>(v));
        if (!sp.row_scaled()) out[sp.extra_offset() + 2 * j + r / 8] |= static_cast<uint8_t>(extra << (r % 8));
      }
      for (int c = 0; c < kQK_K; ++c) {
        const int q = c / 64, p = (c % 64) / 4, i = c % 4, idx = low_index(blk, c);
        out[sp.quants_offset() + 64 * p + 4 * r + i] |= static_cast<uint8_t>((idx & 3) << (2 * q));
        if (sp.third_bit)
          out[sp.bits_offset() + 64 * (p % 8) + 4 * r + i] |= static_cast<uint8_t>((idx >> 2) << (2 * q + p / 8));
      }
    }
  }
}

// Row r's level of column c and integer scale of group j in a packed super-block.
int level(const IqkLowSpec& sp, const uint8_t* blk, int r, int c) {
  const int q = c / 64, p = (c % 64) / 4, i = c % 4, j = c / (kQK_K / sp.n_groups);
  int idx = (blk[sp.quants_offset() + 64 * p + 4 * r + i] >> (2 * q)) & 3;
  if (sp.third_bit) idx |= ((blk[sp.bits_offset() + 64 * (p % 8) + 4 * r + i] >> (2 * q + p / 8)) & 1) << 2;
  const bool extra = sp.row_scaled() ? blk[sp.scale_offset() + 16 * j + r] & 1
                                     : (blk[sp.extra_offset() + 2 * j + r / 8] >> (r % 8)) & 1;
  return sp.table[idx] + (extra ? sp.shift : 0);
}
int group_scale(const IqkLowSpec& sp, const uint8_t* blk, int r, int j) {
  const auto v = static_cast<int8_t>(blk[sp.scale_offset() + 16 * j + r]);
  return sp.row_scaled() ? v >> 1 : v;  // arithmetic shift: drops the extra bit
}

// Row r's super-block scale: an fp16 per row at the group's head (row-scaled types) or at the
// super-block's head.
float block_d(const IqkLowSpec& sp, const uint8_t* group, const uint8_t* blk, int r) {
  uint16_t h;
  std::memcpy(&h, (sp.row_scaled() ? group : blk) + 2 * r, 2);
  return fp16_to_fp32(h);
}

// The scalar twin of both packed_iqk families, against Q8_K: tot = sum over groups of scale *
// sum(level * a), exact in int32; acc = fma(d * d_a, tot, acc) per super-block in order.
template <class Spec>
void gemm_twin(const Spec& sp, int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, int n_tok,
               float* out) {
  const int group_cols = kQK_K / sp.n_groups;
  for (int t = 0; t < n_tok; ++t) {
    const auto* a = reinterpret_cast<const BlockQ8_K*>(act + t * act_stride);
    for (int r = 0; r < kPackedRows; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < n_cols / kQK_K; ++b) {
        const uint8_t* blk = group + sp.header_bytes() + b * sp.bytes();
        int32_t tot = 0;
        for (int j = 0; j < sp.n_groups; ++j) {
          int32_t isum = 0;
          for (int c = group_cols * j; c < group_cols * (j + 1); ++c) isum += level(sp, blk, r, c) * a[b].qs[c];
          tot += group_scale(sp, blk, r, j) * isum;
        }
        acc = std::fma(block_d(sp, group, blk, r) * a[b].d, static_cast<float>(tot), acc);
      }
      out[t * kPackedRows + r] = acc;
    }
  }
}

template <GgmlType kType>
void gemm_ref(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, int n_tok, float* out) {
  static constexpr IqkPackedSpec kSpec = iqk_packed_spec(kType);
  gemm_twin(kSpec, n_cols, group, act, act_stride, n_tok, out);
}

template <GgmlType kType>
void gemm_low_ref(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, int n_tok, float* out) {
  static constexpr IqkLowSpec kSpec = iqk_low_spec(kType);
  gemm_twin(kSpec, n_cols, group, act, act_stride, n_tok, out);
}

// IQ2_KL (layout in packed_iqk.h). Sub-block s of a row: scale, and pair p's 5-bit index.
void pack_iq2_kl(const uint8_t* src, int64_t row_bytes, int64_t n_cols, uint8_t* dst) {
  std::memset(dst, 0, kIQ2KLx16Head);
  for (int r = 0; r < kPackedRows; ++r) std::memcpy(dst + 2 * r, src + r * row_bytes, 2);
  for (int64_t b = 0; b < n_cols / kQK_K; ++b) {
    uint8_t* out = dst + kIQ2KLx16Head + b * kIQ2KLx16Bytes;
    std::memset(out, 0, kIQ2KLx16Bytes);
    for (int r = 0; r < kPackedRows; ++r) {
      const auto& blk = reinterpret_cast<const BlockIQ2_KL*>(src + r * row_bytes + 2)[b];
      for (int s = 0; s < 8; ++s) {
        const int lo = (blk.scales_l[s % 4] >> (4 * (s / 4))) & 0xf;
        out[16 * s + r] = static_cast<uint8_t>(static_cast<int8_t>((lo | ((blk.scales_h >> (2 * s)) & 3) << 4) - 32));
        for (int p = 0; p < 16; ++p) {
          const int nib = (blk.qs[16 * (s / 2) + p] >> (4 * (s % 2))) & 0xf, fifth = (blk.qh[p] >> s) & 1;
          const int h = p / 8, k = (p % 8) / 2, word = 2 * r + p % 2;
          uint8_t* w = out + kIQ2KLx16Nibbles + 64 * (2 * s + h) + 2 * word;
          w[k / 2] = static_cast<uint8_t>(w[k / 2] | nib << (4 * (k % 2)));
          const int bit = 8 * (s % 2) + 4 * h + k;
          uint8_t* f = out + kIQ2KLx16Fifth + 64 * (s / 2) + 2 * word;
          f[bit / 8] = static_cast<uint8_t>(f[bit / 8] | fifth << (bit % 8));
        }
      }
    }
  }
}

// Row r's level of column c (0..255) of a packed IQ2_KL super-block.
int iq2_kl_level(const uint8_t* blk, int r, int c) {
  const int s = c / 32, p = (c % 32) / 2, h = p / 8, k = (p % 8) / 2, word = 2 * r + p % 2;
  uint16_t nibs, fifth;
  std::memcpy(&nibs, blk + kIQ2KLx16Nibbles + 64 * (2 * s + h) + 2 * word, 2);
  std::memcpy(&fifth, blk + kIQ2KLx16Fifth + 64 * (s / 2) + 2 * word, 2);
  const int idx = ((nibs >> (4 * k)) & 0xf) | ((fifth >> (8 * (s % 2) + 4 * h + k)) & 1) << 4;
  return static_cast<int8_t>(c % 2 ? kIQ2KLPairs[idx] >> 8 : kIQ2KLPairs[idx] & 0xff);
}

// As gemm_ref: tot = sum over sub-blocks of scale * sum(level * a); acc = fma(d * d_a, tot, acc).
void gemm_iq2_kl_ref(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, int n_tok,
                     float* out) {
  for (int t = 0; t < n_tok; ++t) {
    const auto* a = reinterpret_cast<const BlockQ8_K*>(act + t * act_stride);
    for (int r = 0; r < kPackedRows; ++r) {
      uint16_t h;
      std::memcpy(&h, group + 2 * r, 2);
      const float d = fp16_to_fp32(h);
      float acc = 0.0f;
      for (int64_t b = 0; b < n_cols / kQK_K; ++b) {
        const uint8_t* blk = group + kIQ2KLx16Head + b * kIQ2KLx16Bytes;
        int32_t tot = 0;
        for (int s = 0; s < 8; ++s) {
          int32_t isum = 0;
          for (int c = 32 * s; c < 32 * s + 32; ++c) isum += iq2_kl_level(blk, r, c) * a[b].qs[c];
          tot += static_cast<int8_t>(blk[16 * s + r]) * isum;
        }
        acc = std::fma(d * a[b].d, static_cast<float>(tot), acc);
      }
      out[t * kPackedRows + r] = acc;
    }
  }
}

}  // namespace

int64_t packed_iqk_group_bytes(GgmlType t, int64_t n_cols) {
  if (t == GgmlType::IQ2_KL) return kIQ2KLx16Head + n_cols / kQK_K * kIQ2KLx16Bytes;
  if (const IqkLowSpec lp = iqk_low_spec(t); lp.n_groups) return lp.header_bytes() + n_cols / kQK_K * lp.bytes();
  const IqkPackedSpec sp = iqk_packed_spec(t);
  return sp.n_groups ? sp.header_bytes() + n_cols / kQK_K * sp.bytes() : 0;
}

void pack_iqk_rows(GgmlType t, const uint8_t* src, int64_t row_bytes, int64_t n_cols, uint8_t* dst) {
  const IqkPackedSpec sp = iqk_packed_spec(t);
  switch (t) {
    case GgmlType::IQ4_K:
      return pack<BlockIQ4_K>(sp, src, row_bytes, n_cols, dst);
    case GgmlType::IQ5_K:
      return pack<BlockIQ5_K>(sp, src, row_bytes, n_cols, dst);
    case GgmlType::IQ6_K:
      return pack<BlockIQ6_K>(sp, src, row_bytes, n_cols, dst);
    case GgmlType::IQ4_KS:
      return pack<BlockIQ4_KS>(sp, src, row_bytes, n_cols, dst);
    case GgmlType::IQ5_KS:
      return pack<BlockIQ5_KS>(sp, src, row_bytes, n_cols, dst);
    case GgmlType::IQ4_KSS:
      return pack<BlockIQ4_KSS>(sp, src, row_bytes, n_cols, dst);
    case GgmlType::IQ2_KL:
      return pack_iq2_kl(src, row_bytes, n_cols, dst);
    case GgmlType::IQ2_K:
      return pack_low<BlockIQ2_K>(iqk_low_spec(t), src, row_bytes, n_cols, dst);
    case GgmlType::IQ3_K:
      return pack_low<BlockIQ3_K>(iqk_low_spec(t), src, row_bytes, n_cols, dst);
    case GgmlType::IQ2_KS:
      return pack_low<BlockIQ2_KS>(iqk_low_spec(t), src, row_bytes, n_cols, dst);
    case GgmlType::IQ3_KS:
      return pack_low<BlockIQ3_KS>(iqk_low_spec(t), src, row_bytes, n_cols, dst);
    default:
      return;
  }
}

PackedGemmFn packed_gemm_iqk_ref_fn(GgmlType t) {
  switch (t) {
    case GgmlType::IQ4_K:
      return gemm_ref<GgmlType::IQ4_K>;
    case GgmlType::IQ5_K:
      return gemm_ref<GgmlType::IQ5_K>;
    case GgmlType::IQ6_K:
      return gemm_ref<GgmlType::IQ6_K>;
    case GgmlType::IQ4_KS:
      return gemm_ref<GgmlType::IQ4_KS>;
    case GgmlType::IQ5_KS:
      return gemm_ref<GgmlType::IQ5_KS>;
    case GgmlType::IQ4_KSS:
      return gemm_ref<GgmlType::IQ4_KS>;  // the same layout
    case GgmlType::IQ2_KL:
      return gemm_iq2_kl_ref;
    case GgmlType::IQ2_K:
      return gemm_low_ref<GgmlType::IQ2_K>;
    case GgmlType::IQ3_K:
      return gemm_low_ref<GgmlType::IQ3_K>;
    case GgmlType::IQ2_KS:
      return gemm_low_ref<GgmlType::IQ2_KS>;
    case GgmlType::IQ3_KS:
      return gemm_low_ref<GgmlType::IQ3_KS>;
    default:
      return nullptr;
  }
}

}  // namespace mla::quant
