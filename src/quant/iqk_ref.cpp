// Scalar references for ik_llama.cpp's non-trellis quants: dequantization bit-exact with
// ik_llama.cpp's dequantize_row_* (the same float operations in the same order: the group factor
// d * scale first, then one multiply per element; IQ6_K evaluates its cubic by Horner's rule in
// three fused multiply-adds, as ik_llama.cpp's native build compiles it: GCC contracts the
// expression there, and the fixtures of tests/fixtures/quant/ik come from such a build),
// and dot products against Q8_0 (Q6_0) or Q8_K (the rest), exact in integers per block with only
// the block's factor applied in float and blocks summed in double.
#include "quant/kernels.h"
MLA_NO_FP_CONTRACT

#include <cmath>

#include "quant/iqk_blocks.h"
#include "quant/iqk_kernels.h"

namespace mla::quant {
namespace {

// Where a row's scale comes from: the block's fp16 d, or the row's fp32 / fp16 header.
enum class RowScale { Block, F32, F16 };

template <RowScale S>
constexpr int64_t header_bytes() {
  return S == RowScale::F32 ? 4 : S == RowScale::F16 ? 2 : 0;
}

template <RowScale S>
float row_scale(const void* row) {
  if constexpr (S == RowScale::F32) return iqk_row_scale_f32(row);
  if constexpr (S == RowScale::F16) return iqk_row_scale_f16(row);
  return 0;
}

template <typename Block, RowScale S>
float block_scale(const Block& b, float row_d) {
  if constexpr (S == RowScale::Block)
    return fp16_to_fp32(b.d);
  else
    return row_d;
}

template <typename Block, RowScale S>
void dequant_iqk(const void* src, float* y, int64_t n) {
  const float row_d = row_scale<S>(src);
  const auto* b = reinterpret_cast<const Block*>(static_cast<const uint8_t*>(src) + header_bytes<S>());
  IqkLevels u;
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K) {
    const float d = block_scale<Block, S>(b[i], row_d);
    iqk_decode(b[i], u);
    const int group = kQK_K / u.n_groups;
    for (int g = 0; g < u.n_groups; ++g) {
      const float dl = d * u.scale[g];
      for (int j = g * group; j < (g + 1) * group; ++j) y[j] = dl * u.level[j];
    }
  }
}

void dequant_iq6_k(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockIQ6_K*>(src);
  const float a = kIQ6KCubic[0], bb = kIQ6KCubic[1], c = kIQ6KCubic[2], dd = kIQ6KCubic[3];
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K) {
    const float d = fp16_to_fp32(b[i].d);
    for (int e = 0; e < kQK_K; ++e) {
      const float dl = d * b[i].scales[e / 16];
      const float m = (b[i].extra >> (e / 16)) & 1 ? 1.f : 0.f;
      const auto q = static_cast<float>(iqk6_index(b[i], e));
      y[e] = dl * (std::fma(q, std::fma(q, std::fma(q, dd, -c), bb), a) + m);
    }
  }
}

void dequant_q6_0(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ6_0*>(src);
  int q[kQK];
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = fp16_to_fp32(b[i].d);
    q6_0_levels(b[i], q);
    for (int j = 0; j < kQK; ++j) y[j] = q[j] * d;
  }
}

template <typename Block, RowScale S>
float dot_iqk(int64_t n, const void* w, const void* a) {
  const float row_d = row_scale<S>(w);
  const auto* x = reinterpret_cast<const Block*>(static_cast<const uint8_t*>(w) + header_bytes<S>());
  const auto* y = static_cast<const BlockQ8_K*>(a);
  IqkLevels u;
  double sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    iqk_decode(x[i], u);
    const int group = kQK_K / u.n_groups;
    int64_t sum_scaled = 0;
    for (int g = 0; g < u.n_groups; ++g) {
      int32_t sum_qa = 0;
      for (int j = g * group; j < (g + 1) * group; ++j) sum_qa += u.level[j] * y[i].qs[j];
      sum_scaled += static_cast<int64_t>(u.scale[g]) * sum_qa;
    }
    sum += static_cast<double>(block_scale<Block, S>(x[i], row_d) * y[i].d) * static_cast<double>(sum_scaled);
  }
  return static_cast<float>(sum);
}

float dot_q6_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ6_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  int q[kQK];
  double sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    q6_0_levels(x[i], q);
    int32_t sum_qa = 0;
    for (int j = 0; j < kQK; ++j) sum_qa += q[j] * y[i].qs[j];
    sum += static_cast<double>(fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d)) * sum_qa;
  }
  return static_cast<float>(sum);
}

}  // namespace

DequantizeFn dequantize_iqk_ref_fn(GgmlType t) {
  switch (t) {
    case GgmlType::Q6_0:
      return dequant_q6_0;
    case GgmlType::IQ2_K:
      return dequant_iqk<BlockIQ2_K, RowScale::Block>;
    case GgmlType::IQ3_K:
      return dequant_iqk<BlockIQ3_K, RowScale::Block>;
    case GgmlType::IQ4_K:
      return dequant_iqk<BlockIQ4_K, RowScale::Block>;
    case GgmlType::IQ5_K:
      return dequant_iqk<BlockIQ5_K, RowScale::Block>;
    case GgmlType::IQ6_K:
      return dequant_iq6_k;
    case GgmlType::IQ4_KS:
      return dequant_iqk<BlockIQ4_KS, RowScale::F32>;
    case GgmlType::IQ4_KSS:
      return dequant_iqk<BlockIQ4_KSS, RowScale::F32>;
    case GgmlType::IQ5_KS:
      return dequant_iqk<BlockIQ5_KS, RowScale::F32>;
    case GgmlType::IQ2_KS:
      return dequant_iqk<BlockIQ2_KS, RowScale::F16>;
    case GgmlType::IQ3_KS:
      return dequant_iqk<BlockIQ3_KS, RowScale::F16>;
    case GgmlType::IQ2_KL:
      return dequant_iqk<BlockIQ2_KL, RowScale::F16>;
    default:
      return nullptr;
  }
}

VecDotFn vec_dot_iqk_ref_fn(GgmlType t) {
  switch (t) {
    case GgmlType::Q6_0:
      return dot_q6_0;
    case GgmlType::IQ2_K:
      return dot_iqk<BlockIQ2_K, RowScale::Block>;
    case GgmlType::IQ3_K:
      return dot_iqk<BlockIQ3_K, RowScale::Block>;
    case GgmlType::IQ4_K:
      return dot_iqk<BlockIQ4_K, RowScale::Block>;
    case GgmlType::IQ5_K:
      return dot_iqk<BlockIQ5_K, RowScale::Block>;
    case GgmlType::IQ6_K:
      return dot_iqk<BlockIQ6_K, RowScale::Block>;
    case GgmlType::IQ4_KS:
      return dot_iqk<BlockIQ4_KS, RowScale::F32>;
    case GgmlType::IQ4_KSS:
      return dot_iqk<BlockIQ4_KSS, RowScale::F32>;
    case GgmlType::IQ5_KS:
      return dot_iqk<BlockIQ5_KS, RowScale::F32>;
    case GgmlType::IQ2_KS:
      return dot_iqk<BlockIQ2_KS, RowScale::F16>;
    case GgmlType::IQ3_KS:
      return dot_iqk<BlockIQ3_KS, RowScale::F16>;
    case GgmlType::IQ2_KL:
      return dot_iqk<BlockIQ2_KL, RowScale::F16>;
    default:
      return nullptr;
  }
}

}  // namespace mla::quant
