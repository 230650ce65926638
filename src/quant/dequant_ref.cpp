// Scalar reference dequantization, bit-exact with ggml's dequantize_row_* and gguf-py: every
// value is computed with the same float operations in the same order (scale products first,
// then one multiply and one add or subtract per element; no FMA contraction).
#include "quant/kernels.h"
MLA_NO_FP_CONTRACT

#include <cstring>

#include "quant/iqk_kernels.h"
#include "util/ggml_blocks.h"

namespace mla::quant {
namespace {

void dequant_f32(const void* src, float* y, int64_t n) { std::memcpy(y, src, n * sizeof(float)); }

void dequant_f16(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_fp32(x[i]);
}

void dequant_bf16(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_fp32(x[i]);
}

void dequant_q4_0(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = ((b[i].qs[j] & 0x0F) - 8) * d;
      y[j + 16] = ((b[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequant_q4_1(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ4_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = fp16_to_fp32(b[i].d);
    const float m = fp16_to_fp32(b[i].m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = (b[i].qs[j] & 0x0F) * d + m;
      y[j + 16] = (b[i].qs[j] >> 4) * d + m;
    }
  }
}

// The 5-bit value of element j of a Q5_0/Q5_1 block: nibble | bit j of qh << 4.
inline int q5_value(const uint8_t* qs, uint32_t qh, int j) {
  const int lo = j < 16 ? (qs[j] & 0x0F) : (qs[j - 16] >> 4);
  return lo | static_cast<int>(((qh >> j) & 1) << 4);
}

void dequant_q5_0(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ5_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = fp16_to_fp32(b[i].d);
    uint32_t qh;
    std::memcpy(&qh, b[i].qh, 4);
    for (int j = 0; j < kQK; ++j) y[j] = (q5_value(b[i].qs, qh, j) - 16) * d;
  }
}

void dequant_q5_1(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ5_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = fp16_to_fp32(b[i].d);
    const float m = fp16_to_fp32(b[i].m);
    uint32_t qh;
    std::memcpy(&qh, b[i].qh, 4);
    for (int j = 0; j < kQK; ++j) y[j] = q5_value(b[i].qs, qh, j) * d + m;
  }
}

void dequant_q8_0(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = b[i].qs[j] * d;
  }
}

void dequant_q2_k(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ2_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    const float dmin = fp16_to_fp32(b[i].dmin);
    // Element 128*h + 32*s + l lives in bits 2s..2s+1 of qs[32*h + l]; 16 elements per scale.
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, s = (e % 128) / 32, l = e % 32;
      const uint8_t sc = b[i].scales[e / 16];
      const float dl = d * (sc & 0x0F);
      const float ml = dmin * (sc >> 4);
      y[e] = dl * ((b[i].qs[32 * h + l] >> (2 * s)) & 3) - ml;
    }
    y += kQK_K;
  }
}

void dequant_q3_k(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ3_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    int8_t scales[16];
    unpack_q3_k_scales(b[i].scales, scales);
    // Low bits as in Q2_K; the high bit of element e is bit e/32 of hmask[e%32], and a clear
    // bit subtracts 4.
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, s = (e % 128) / 32, l = e % 32;
      const int lo = (b[i].qs[32 * h + l] >> (2 * s)) & 3;
      const int q = lo - (((b[i].hmask[l] >> (e / 32)) & 1) ? 0 : 4);
      const float dl = d * scales[e / 16];
      y[e] = dl * q;
    }
    y += kQK_K;
  }
}

// Q4_K and Q5_K: sub-block s (32 elements) is nibble (s%2) of qs[32*(s/2) + l]; Q5_K adds a
// fifth bit, bit s of qh[l] (high_bit returns it already shifted, or 0).
template <typename Block, typename HighBit>
void dequant_k4_like(const void* src, float* y, int64_t n, HighBit high_bit) {
  const auto* b = static_cast<const Block*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    const float dmin = fp16_to_fp32(b[i].dmin);
    uint8_t sc[8], mn[8];
    unpack_k4_scales(b[i].scales, sc, mn);
    for (int s = 0; s < 8; ++s) {
      const float dl = d * sc[s];
      const float ml = dmin * mn[s];
      const uint8_t* q = b[i].qs + 32 * (s / 2);
      const int shift = 4 * (s % 2);
      for (int l = 0; l < 32; ++l) y[32 * s + l] = dl * (((q[l] >> shift) & 0x0F) | high_bit(b[i], s, l)) - ml;
    }
    y += kQK_K;
  }
}

void dequant_q4_k(const void* src, float* y, int64_t n) {
  dequant_k4_like<BlockQ4_K>(src, y, n, [](const BlockQ4_K&, int, int) { return 0; });
}

void dequant_q5_k(const void* src, float* y, int64_t n) {
  dequant_k4_like<BlockQ5_K>(src, y, n, [](const BlockQ5_K& blk, int s, int l) { return ((blk.qh[l] >> s) & 1) << 4; });
}

void dequant_q6_k(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    // Element 128*h + r: low nibble (r/64) of ql[64*h + r%64], high 2 bits at bit 2*(r/32)
    // of qh[32*h + r%32]; 16 elements per int8 scale.
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, r = e % 128;
      const int lo = (b[i].ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0F;
      const int hi = (b[i].qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
      const float dl = d * b[i].scales[e / 16];
      y[e] = dl * ((lo | (hi << 4)) - 32);
    }
    y += kQK_K;
  }
}

void dequant_q8_k(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ8_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K)
    for (int j = 0; j < kQK_K; ++j) y[j] = b[i].d * b[i].qs[j];
}

void dequant_iq4_nl(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockIQ4_NL*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * kIQ4NLValues[b[i].qs[j] & 0x0F];
      y[j + 16] = d * kIQ4NLValues[b[i].qs[j] >> 4];
    }
  }
}

void dequant_iq4_xs(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockIQ4_XS*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    for (int s = 0; s < 8; ++s) {
      const int ls = ((b[i].scales_l[s / 2] >> (4 * (s % 2))) & 0x0F) | (((b[i].scales_h >> (2 * s)) & 3) << 4);
      const float dl = d * (ls - 32);
      const uint8_t* q = b[i].qs + 16 * s;
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * kIQ4NLValues[q[j] & 0x0F];
        y[j + 16] = dl * kIQ4NLValues[q[j] >> 4];
      }
      y += 32;
    }
  }
}

void dequant_mxfp4(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockMXFP4*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = e8m0_to_fp32_half(b[i].e);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = kMXFP4Values[b[i].qs[j] & 0x0F] * d;
      y[j + 16] = kMXFP4Values[b[i].qs[j] >> 4] * d;
    }
  }
}

void dequant_nvfp4(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockNVFP4*>(src);
  for (int64_t i = 0; i < n / 64; ++i) {
    for (int s = 0; s < 4; ++s, y += 16) {
      const float d = ue4m3_to_fp32_half(b[i].d[s]);
      for (int j = 0; j < 8; ++j) {
        y[j] = kMXFP4Values[b[i].qs[8 * s + j] & 0x0F] * d;
        y[j + 8] = kMXFP4Values[b[i].qs[8 * s + j] >> 4] * d;
      }
    }
  }
}

}  // namespace

DequantizeFn dequantize_ref_fn(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
      return dequant_f32;
    case GgmlType::F16:
      return dequant_f16;
    case GgmlType::BF16:
      return dequant_bf16;
    case GgmlType::Q4_0:
      return dequant_q4_0;
    case GgmlType::Q4_1:
      return dequant_q4_1;
    case GgmlType::Q5_0:
      return dequant_q5_0;
    case GgmlType::Q5_1:
      return dequant_q5_1;
    case GgmlType::Q8_0:
      return dequant_q8_0;
    case GgmlType::Q2_K:
      return dequant_q2_k;
    case GgmlType::Q3_K:
      return dequant_q3_k;
    case GgmlType::Q4_K:
      return dequant_q4_k;
    case GgmlType::Q5_K:
      return dequant_q5_k;
    case GgmlType::Q6_K:
      return dequant_q6_k;
    case GgmlType::Q8_K:
      return dequant_q8_k;
    case GgmlType::IQ4_NL:
      return dequant_iq4_nl;
    case GgmlType::IQ4_XS:
      return dequant_iq4_xs;
    case GgmlType::MXFP4:
      return dequant_mxfp4;
    case GgmlType::NVFP4:
      return dequant_nvfp4;
    default:
      if (DequantizeFn f = dequantize_iqk_ref_fn(t)) return f;
      if (DequantizeFn f = dequantize_iq_ref_fn(t)) return f;
      return dequantize_kt_ref_fn(t);
  }
}

}  // namespace mla::quant
