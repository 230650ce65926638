// Scalar reference dot products: one weight row times one activation row already quantized to
// vec_dot_type(weight). Written for clarity: each weight block is first unpacked into integer
// levels and integer group scales, then summed exactly in integers per block; only the block
// result is scaled in float, and blocks are accumulated in double. The SIMD kernels are checked
// against these.
#include <cstring>

#include "quant/iqk_kernels.h"
#include "quant/kernels.h"
#include "util/ggml_blocks.h"

namespace mla::quant {
namespace {

float dot_f32(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const float*>(w);
  const auto* y = static_cast<const float*>(a);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * y[i];
  return static_cast<float>(sum);
}

template <float (*Convert)(uint16_t)>
float dot_half(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(Convert(x[i])) * Convert(y[i]);
  return static_cast<float>(sum);
}

// ---- 32-element weight blocks times Q8_0 ------------------------------------------------
// Each unpacker gives the block's levels q[32], its scale d and offset m (x = d*q + m).
struct Unpacked32 {
  int q[kQK] = {};
  float d = 0;
  float m = 0;
};

void nibbles(const uint8_t* qs, int* q, int bias) {
  for (int j = 0; j < 16; ++j) {
    q[j] = (qs[j] & 0x0F) - bias;
    q[j + 16] = (qs[j] >> 4) - bias;
  }
}

Unpacked32 unpack(const BlockQ4_0& b) {
  Unpacked32 u{.d = fp16_to_fp32(b.d)};
  nibbles(b.qs, u.q, 8);
  return u;
}
Unpacked32 unpack(const BlockQ4_1& b) {
  Unpacked32 u{.d = fp16_to_fp32(b.d), .m = fp16_to_fp32(b.m)};
  nibbles(b.qs, u.q, 0);
  return u;
}
void add_high_bits(const uint8_t* qh_bytes, int* q, int bias) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < kQK; ++j) q[j] += static_cast<int>(((qh >> j) & 1) << 4) - bias;
}
Unpacked32 unpack(const BlockQ5_0& b) {
  Unpacked32 u{.d = fp16_to_fp32(b.d)};
  nibbles(b.qs, u.q, 0);
  add_high_bits(b.qh, u.q, 16);
  return u;
}
Unpacked32 unpack(const BlockQ5_1& b) {
  Unpacked32 u{.d = fp16_to_fp32(b.d), .m = fp16_to_fp32(b.m)};
  nibbles(b.qs, u.q, 0);
  add_high_bits(b.qh, u.q, 0);
  return u;
}
Unpacked32 unpack(const BlockQ8_0& b) {
  Unpacked32 u{.d = fp16_to_fp32(b.d)};
  for (int j = 0; j < kQK; ++j) u.q[j] = b.qs[j];
  return u;
}
Unpacked32 unpack(const BlockIQ4_NL& b) {
  Unpacked32 u{.d = fp16_to_fp32(b.d)};
  nibbles(b.qs, u.q, 0);
  for (int& v : u.q) v = kIQ4NLValues[v];
  return u;
}
Unpacked32 unpack(const BlockMXFP4& b) {
  Unpacked32 u{.d = e8m0_to_fp32_half(b.e)};
  nibbles(b.qs, u.q, 0);
  for (int& v : u.q) v = kMXFP4Values[v];
  return u;
}

template <typename Block>
float dot_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  double sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const Unpacked32 u = unpack(x[i]);
    int32_t sum_qa = 0, sum_a = 0;
    for (int j = 0; j < kQK; ++j) {
      sum_qa += u.q[j] * y[i].qs[j];
      sum_a += y[i].qs[j];
    }
    const float da = fp16_to_fp32(y[i].d);
    sum += static_cast<double>(u.d * da) * sum_qa + static_cast<double>(u.m * da) * sum_a;
  }
  return static_cast<float>(sum);
}

// NVFP4: each 64-element block meets two Q8_0 blocks; each 16-element sub-block has its own scale.
float dot_nvfp4(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockNVFP4*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  double sum = 0;
  for (int64_t i = 0; i < n / 64; ++i) {
    for (int s = 0; s < 4; ++s) {
      const BlockQ8_0& ya = y[2 * i + s / 2];
      const int8_t* q = ya.qs + 16 * (s % 2);
      int32_t sum_qa = 0;
      for (int j = 0; j < 8; ++j) {
        sum_qa += kMXFP4Values[x[i].qs[8 * s + j] & 0x0F] * q[j];
        sum_qa += kMXFP4Values[x[i].qs[8 * s + j] >> 4] * q[j + 8];
      }
      sum += static_cast<double>(ue4m3_to_fp32_half(x[i].d[s]) * fp16_to_fp32(ya.d)) * sum_qa;
    }
  }
  return static_cast<float>(sum);
}

// ---- 256-element weight super-blocks times Q8_K ------------------------------------------
// Each unpacker gives levels q[256], integer group scales sc[] and mins mn[] (groups of
// 256/n_groups elements) and the super-block factors: x = d*sc*q - dmin*mn.
struct Unpacked256 {
  int q[kQK_K] = {};
  int sc[16] = {};
  int mn[16] = {};
  int n_groups = 0;
  float d = 0;
  float dmin = 0;
};

Unpacked256 unpack(const BlockQ2_K& b) {
  Unpacked256 u{.n_groups = 16, .d = fp16_to_fp32(b.d), .dmin = fp16_to_fp32(b.dmin)};
  for (int e = 0; e < kQK_K; ++e) u.q[e] = (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
  for (int g = 0; g < 16; ++g) {
    u.sc[g] = b.scales[g] & 0x0F;
    u.mn[g] = b.scales[g] >> 4;
  }
  return u;
}
Unpacked256 unpack(const BlockQ3_K& b) {
  Unpacked256 u{.n_groups = 16, .d = fp16_to_fp32(b.d)};
  for (int e = 0; e < kQK_K; ++e) {
    const int lo = (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
    u.q[e] = lo - (((b.hmask[e % 32] >> (e / 32)) & 1) ? 0 : 4);
  }
  int8_t sc[16];
  unpack_q3_k_scales(b.scales, sc);
  for (int g = 0; g < 16; ++g) u.sc[g] = sc[g];
  return u;
}
Unpacked256 unpack(const BlockQ4_K& b) {
  Unpacked256 u{.n_groups = 8, .d = fp16_to_fp32(b.d), .dmin = fp16_to_fp32(b.dmin)};
  for (int e = 0; e < kQK_K; ++e) u.q[e] = (b.qs[32 * (e / 64) + e % 32] >> (4 * ((e / 32) % 2))) & 0x0F;
  uint8_t sc[8], mn[8];
  unpack_k4_scales(b.scales, sc, mn);
  for (int g = 0; g < 8; ++g) {
    u.sc[g] = sc[g];
    u.mn[g] = mn[g];
  }
  return u;
}
Unpacked256 unpack(const BlockQ5_K& b) {
  Unpacked256 u{.n_groups = 8, .d = fp16_to_fp32(b.d), .dmin = fp16_to_fp32(b.dmin)};
  for (int e = 0; e < kQK_K; ++e) {
    const int lo = (b.qs[32 * (e / 64) + e % 32] >> (4 * ((e / 32) % 2))) & 0x0F;
    u.q[e] = lo | (((b.qh[e % 32] >> (e / 32)) & 1) << 4);
  }
  uint8_t sc[8], mn[8];
  unpack_k4_scales(b.scales, sc, mn);
  for (int g = 0; g < 8; ++g) {
    u.sc[g] = sc[g];
    u.mn[g] = mn[g];
  }
  return u;
}
Unpacked256 unpack(const BlockQ6_K& b) {
  Unpacked256 u{.n_groups = 16, .d = fp16_to_fp32(b.d)};
  for (int e = 0; e < kQK_K; ++e) {
    const int h = e / 128, r = e % 128;
    const int lo = (b.ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0F;
    const int hi = (b.qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
    u.q[e] = (lo | (hi << 4)) - 32;
  }
  for (int g = 0; g < 16; ++g) u.sc[g] = b.scales[g];
  return u;
}
Unpacked256 unpack(const BlockIQ4_XS& b) {
  Unpacked256 u{.n_groups = 8, .d = fp16_to_fp32(b.d)};
  for (int s = 0; s < 8; ++s) {
    u.sc[s] = (((b.scales_l[s / 2] >> (4 * (s % 2))) & 0x0F) | (((b.scales_h >> (2 * s)) & 3) << 4)) - 32;
    for (int j = 0; j < 16; ++j) {
      u.q[32 * s + j] = kIQ4NLValues[b.qs[16 * s + j] & 0x0F];
      u.q[32 * s + j + 16] = kIQ4NLValues[b.qs[16 * s + j] >> 4];
    }
  }
  return u;
}
Unpacked256 unpack(const BlockQ8_K& b) {
  Unpacked256 u{.n_groups = 1, .d = b.d};
  for (int e = 0; e < kQK_K; ++e) u.q[e] = b.qs[e];
  u.sc[0] = 1;
  return u;
}

template <typename Block>
float dot_q8_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  double sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const Unpacked256 u = unpack(x[i]);
    const int group = kQK_K / u.n_groups;
    int64_t sum_scaled = 0, sum_mins = 0;
    for (int g = 0; g < u.n_groups; ++g) {
      int32_t sum_qa = 0, sum_a = 0;
      for (int j = g * group; j < (g + 1) * group; ++j) {
        sum_qa += u.q[j] * y[i].qs[j];
        sum_a += y[i].qs[j];
      }
      sum_scaled += static_cast<int64_t>(u.sc[g]) * sum_qa;
      sum_mins += static_cast<int64_t>(u.mn[g]) * sum_a;
    }
    sum += static_cast<double>(u.d * y[i].d) * sum_scaled - static_cast<double>(u.dmin * y[i].d) * sum_mins;
  }
  return static_cast<float>(sum);
}

}  // namespace

VecDotFn vec_dot_ref_fn(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
      return dot_f32;
    case GgmlType::F16:
      return dot_half<fp16_to_fp32>;
    case GgmlType::BF16:
      return dot_half<bf16_to_fp32>;
    case GgmlType::Q4_0:
      return dot_q8_0<BlockQ4_0>;
    case GgmlType::Q4_1:
      return dot_q8_0<BlockQ4_1>;
    case GgmlType::Q5_0:
      return dot_q8_0<BlockQ5_0>;
    case GgmlType::Q5_1:
      return dot_q8_0<BlockQ5_1>;
    case GgmlType::Q8_0:
      return dot_q8_0<BlockQ8_0>;
    case GgmlType::IQ4_NL:
      return dot_q8_0<BlockIQ4_NL>;
    case GgmlType::MXFP4:
      return dot_q8_0<BlockMXFP4>;
    case GgmlType::NVFP4:
      return dot_nvfp4;
    case GgmlType::Q2_K:
      return dot_q8_k<BlockQ2_K>;
    case GgmlType::Q3_K:
      return dot_q8_k<BlockQ3_K>;
    case GgmlType::Q4_K:
      return dot_q8_k<BlockQ4_K>;
    case GgmlType::Q5_K:
      return dot_q8_k<BlockQ5_K>;
    case GgmlType::Q6_K:
      return dot_q8_k<BlockQ6_K>;
    case GgmlType::IQ4_XS:
      return dot_q8_k<BlockIQ4_XS>;
    case GgmlType::Q8_K:
      return dot_q8_k<BlockQ8_K>;
    default:
      if (VecDotFn f = vec_dot_iqk_ref_fn(t)) return f;
      if (VecDotFn f = vec_dot_iq_ref_fn(t)) return f;
      return vec_dot_kt_ref_fn(t);
  }
}

}  // namespace mla::quant
