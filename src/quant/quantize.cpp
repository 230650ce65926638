// Scalar quantizers for the plain and 32-element formats and for Q8_K activations. Each is
// bit-exact with ggml's quantize_row_*_ref (and with gguf-py where it has one).
#include "quant/kernels.h"
MLA_NO_FP_CONTRACT

#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/iqk_kernels.h"
#include "util/ggml_blocks.h"

namespace mla::quant {
namespace {

void quant_f32(const float* x, void* dst, int64_t n) { std::memcpy(dst, x, n * sizeof(float)); }

void quant_f16(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

void quant_bf16(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_bf16(x[i]);
}

// d = max|x|/127, q = round-half-away(x/d).
void quant_q8_0(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) {
      const float ax = std::fabs(x[j]);
      amax = amax > ax ? amax : ax;  // as ggml's MAX: a NaN propagates
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    // |x*id| <= 127 for finite input; the clamp only keeps inf/NaN (from a subnormal d) defined.
    for (int j = 0; j < kQK; ++j)
      b[i].qs[j] = static_cast<int8_t>(std::fmax(-127.0f, std::fmin(127.0f, std::round(x[j] * id))));
  }
}

// The block's value of largest magnitude, with its sign (the first one on ties; a NaN is skipped).
float signed_absmax(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kQK; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

// min(top, trunc(x*id + offset)): x*id + offset lies in [0.5, 2*offset - 0.5] for finite input;
// the clamp keeps inf/NaN defined. The product and the sum round separately, as in ggml's
// quantize_row_*_ref (ggml-base is built without FMA; an FMA here changed one value in 262144 of
// tools/quant-compare's uniform data) and in gguf-py.
int level(float x, float id, float offset, int top) {
  const float scaled = x * id;
  const int q = static_cast<int>(std::fmax(0.0f, std::fmin(2 * offset - 1, scaled + offset)));
  return q < top ? q : top;
}

// The scale maps the value of largest magnitude to -8 (so the other sign reaches +7 at most):
// d = max/-8, q = min(15, trunc(x/d + 8.5)).
void quant_q4_0(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ4_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    const float d = signed_absmax(x) / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK / 2; ++j)
      b[i].qs[j] = static_cast<uint8_t>(level(x[j], id, 8.5f, 15) | (level(x[j + 16], id, 8.5f, 15) << 4));
  }
}

// The same with a fifth bit: d = max/-16, q = min(31, trunc(x/d + 16.5)); the low nibbles as Q4_0,
// the fifth bits of the 32 elements packed into qh (bit j of the little-endian word = element j).
void quant_q5_0(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ5_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    const float d = signed_absmax(x) / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = level(x[j], id, 16.5f, 31), q1 = level(x[j + 16], id, 16.5f, 31);
      b[i].qs[j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
      qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + kQK / 2);
    }
    std::memcpy(b[i].qh, &qh, sizeof qh);
  }
}

// Affine with a fifth bit: d = (max - min)/31, m = min, q = trunc((x - min)/d + 0.5); packed as
// Q5_0.
void quant_q5_1(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ5_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float min = x[0], max = x[0];
    for (int j = 1; j < kQK; ++j) {
      min = std::min(min, x[j]);
      max = std::max(max, x[j]);
    }
    const float d = (max - min) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    b[i].m = fp32_to_fp16(min);
    uint32_t qh = 0;
    // (x - min) * id lies in [0, 31] for finite input; the clamp keeps inf/NaN defined.
    auto level = [&](float v) { return static_cast<int>(std::fmax(0.0f, std::fmin(31.0f, (v - min) * id + 0.5f))); };
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = level(x[j]), q1 = level(x[j + 16]);
      b[i].qs[j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
      qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + kQK / 2);
    }
    std::memcpy(b[i].qh, &qh, sizeof qh);
  }
}

// Activations for K-quant dot products: the value of largest magnitude maps to -127, the rest
// round to nearest-even; d is kept in fp32 and bsums hold each 16-element sum.
void quant_q8_k(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQK_K; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      std::memset(&b[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQK_K; ++j) {
      const int v = nearest_int(iscale * x[j]);
      b[i].qs[j] = static_cast<int8_t>(v < 127 ? v : 127);
    }
    for (int g = 0; g < kQK_K / 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += b[i].qs[16 * g + j];
      b[i].bsums[g] = static_cast<int16_t>(sum);
    }
    b[i].d = 1.0f / iscale;
  }
}

}  // namespace

QuantizeFn quantize_ref_fn(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
      return quant_f32;
    case GgmlType::F16:
      return quant_f16;
    case GgmlType::BF16:
      return quant_bf16;
    case GgmlType::Q8_0:
      return quant_q8_0;
    case GgmlType::Q4_0:
      return quant_q4_0;
    case GgmlType::Q5_0:
      return quant_q5_0;
    case GgmlType::Q5_1:
      return quant_q5_1;
    case GgmlType::Q2_K:
      return quantize_q2_k_ref;
    case GgmlType::Q3_K:
      return quantize_q3_k_ref;
    case GgmlType::Q4_K:
      return quantize_q4_k_ref;
    case GgmlType::Q5_K:
      return quantize_q5_k_ref;
    case GgmlType::Q6_K:
      return quantize_q6_k_ref;
    case GgmlType::Q8_K:
      return quant_q8_k;
    default:
      if (QuantizeFn f = quantize_iq4_ref_fn(t)) return f;
      if (QuantizeFn f = quantize_iqk_ref_fn(t)) return f;
      return quantize_iq_ref_fn(t);
  }
}

}  // namespace mla::quant
