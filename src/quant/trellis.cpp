// Scalar references of ik_llama.cpp's trellis types (trellis.h describes the format).
// Dequantization is bit-identical to ik_llama.cpp's: each value is one float product of the block
// scale (row scale times an integer) and the integer level, in that order. The dot products sum
// levels times Q8_K quants exactly in integers per super-block and scale in float only then.
#include <cmath>

#include "quant/kernels.h"
#include "quant/trellis.h"

MLA_NO_FP_CONTRACT

namespace mla::quant {
namespace {

// The super-blocks of a row, after its float scale.
template <typename Block>
const Block* kt_blocks(const void* row) {
  return reinterpret_cast<const Block*>(static_cast<const uint8_t*>(row) + 4);
}

void dequant_iq1_kt(const void* src, float* y, int64_t n) {
  const float d = kt_row_scale(src);
  const auto* b = kt_blocks<BlockIQ1_KT>(src);
  int32_t level[8];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    for (int g = 0; g < 32; ++g, y += 8) {
      const float sl = d * kIQ4KValues[b[i].sh[g / 4] & 0x0F];
      trellis_levels(iq1_kt_index(b[i], g), kTrellisOffset, 8, level);
      for (int k = 0; k < 8; ++k) y[k] = sl * static_cast<float>(level[k]);
    }
  }
}

void dequant_iq2_kt(const void* src, float* y, int64_t n) {
  const float d = kt_row_scale(src);
  const auto* b = kt_blocks<BlockIQ2_KT>(src);
  int32_t level[8];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    for (int g = 0; g < 32; ++g, y += 8) {
      const float sl = d * kIQ4KValues[kt_half_scale_index(b[i].scales, g / 4)];
      trellis_levels(load_u16(b[i].ql + 2 * g), kTrellisOffset, 8, level);
      for (int k = 0; k < 8; ++k) y[k] = sl * static_cast<float>(level[k]);
    }
  }
}

void dequant_iq3_kt(const void* src, float* y, int64_t n) {
  const float d = kt_row_scale(src);
  const auto* b = kt_blocks<BlockIQ3_KT>(src);
  int32_t level[8];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    for (int g = 0; g < 32; ++g, y += 8) {
      const int block = g / 4;
      const float sl = d * static_cast<float>(kt_half_scale_index(b[i].scales, block));
      trellis_levels(load_u16(b[i].ql + 2 * g), kTrellisOffset, 8, level);
      for (int k = 0; k < 8; ++k) {
        y[k] = sl * std::abs(static_cast<float>(level[k]));
        if (b[i].qh[8 * (g % 4) + k] >> block & 1) y[k] = -y[k];
      }
    }
  }
}

void dequant_iq4_kt(const void* src, float* y, int64_t n) {
  const float d = kt_row_scale(src);
  const auto* b = kt_blocks<BlockIQ4_KT>(src);
  int32_t level[4];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    for (int g = 0; g < 64; ++g, y += 4) {
      const float sl = d * static_cast<float>(iq4_kt_scale(b[i], g / 8));
      uint32_t offset = 0;
      const uint32_t idx = iq4_kt_index(b[i], g, &offset);
      trellis_levels(idx, offset, 4, level);
      for (int k = 0; k < 4; ++k) y[k] = sl * static_cast<float>(level[k]);
    }
  }
}

// Every type's super-block as 256 signed levels (signs applied) and 8 integer block scales.
struct KtUnpacked {
  int32_t level[kQK_K];
  int32_t scale[8];
};

void unpack(const BlockIQ1_KT& b, KtUnpacked& u) {
  for (int g = 0; g < 32; ++g) trellis_levels(iq1_kt_index(b, g), kTrellisOffset, 8, u.level + 8 * g);
  for (int ib = 0; ib < 8; ++ib) u.scale[ib] = kIQ4KValues[b.sh[ib] & 0x0F];
}
void unpack(const BlockIQ2_KT& b, KtUnpacked& u) {
  for (int g = 0; g < 32; ++g) trellis_levels(load_u16(b.ql + 2 * g), kTrellisOffset, 8, u.level + 8 * g);
  for (int ib = 0; ib < 8; ++ib) u.scale[ib] = kIQ4KValues[kt_half_scale_index(b.scales, ib)];
}
void unpack(const BlockIQ3_KT& b, KtUnpacked& u) {
  for (int g = 0; g < 32; ++g) {
    int32_t* l = u.level + 8 * g;
    trellis_levels(load_u16(b.ql + 2 * g), kTrellisOffset, 8, l);
    for (int k = 0; k < 8; ++k) l[k] = (b.qh[8 * (g % 4) + k] >> (g / 4) & 1) ? -std::abs(l[k]) : std::abs(l[k]);
  }
  for (int ib = 0; ib < 8; ++ib) u.scale[ib] = kt_half_scale_index(b.scales, ib);
}
void unpack(const BlockIQ4_KT& b, KtUnpacked& u) {
  for (int g = 0; g < 64; ++g) {
    uint32_t offset = 0;
    const uint32_t idx = iq4_kt_index(b, g, &offset);
    trellis_levels(idx, offset, 4, u.level + 4 * g);
  }
  for (int ib = 0; ib < 8; ++ib) u.scale[ib] = iq4_kt_scale(b, ib);
}

template <typename Block>
float dot_kt(int64_t n, const void* w, const void* a) {
  const double d = kt_row_scale(w);
  const auto* x = kt_blocks<Block>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  KtUnpacked u;
  double sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    unpack(x[i], u);
    int64_t total = 0;
    for (int ib = 0; ib < 8; ++ib) {
      int32_t s = 0;
      for (int j = 0; j < 32; ++j) s += u.level[32 * ib + j] * y[i].qs[32 * ib + j];
      total += static_cast<int64_t>(u.scale[ib]) * s;
    }
    sum += static_cast<double>(y[i].d) * static_cast<double>(total);
  }
  return static_cast<float>(d * sum);
}

}  // namespace

DequantizeFn dequantize_kt_ref_fn(GgmlType t) {
  switch (t) {
    case GgmlType::IQ1_KT:
      return dequant_iq1_kt;
    case GgmlType::IQ2_KT:
      return dequant_iq2_kt;
    case GgmlType::IQ3_KT:
      return dequant_iq3_kt;
    case GgmlType::IQ4_KT:
      return dequant_iq4_kt;
    default:
      return nullptr;
  }
}

VecDotFn vec_dot_kt_ref_fn(GgmlType t) {
  switch (t) {
    case GgmlType::IQ1_KT:
      return dot_kt<BlockIQ1_KT>;
    case GgmlType::IQ2_KT:
      return dot_kt<BlockIQ2_KT>;
    case GgmlType::IQ3_KT:
      return dot_kt<BlockIQ3_KT>;
    case GgmlType::IQ4_KT:
      return dot_kt<BlockIQ4_KT>;
    default:
      return nullptr;
  }
}

}  // namespace mla::quant
