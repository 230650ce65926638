// Quantizers for ik_llama.cpp's Q6_0, IQ4_K, IQ4_KS and IQ5_KS without an importance matrix,
// written from ik_llama.cpp's algorithms so that they give its bytes (tests/quant/iqk_test.cpp
// checks them against its quantizer's output):
//  - Q6_0: per 32 values, the symmetric 6-bit fit of the K-quants (a fan of 19 grids around
//    -32/max, weights x^2), then greedy single-level moves while they raise the explained energy;
//  - IQ4_K (groups of 16), IQ4_KS and IQ5_KS (groups of 32): per group, a fan of grids around the
//    value of largest magnitude over the non-linear level table and its shifted twin, both signs,
//    keeping the least-squares scale that explains the most weighted energy (weights x^2); then the
//    group scales are quantized against one super-block (IQ4_K) or row (IQ4_KS, IQ5_KS) scale and
//    every element is re-rounded to the level nearest under its final scale; the stored scale is the
//    least-squares fit of the whole super-block / row to those levels.
// ik_llama.cpp's native build (GCC, -march=native) contracts the IQ4_K / IQ4_KS / IQ5_KS sums into
// fused multiply-adds; those contractions are written out here with std::fma so the bytes agree on
// every host. Its Q6_0 fit (C, ggml-quants.c) rounds every product and sum separately, as here.
#include "quant/kernels.h"
MLA_NO_FP_CONTRACT

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "quant/iqk_blocks.h"
#include "quant/iqk_kernels.h"

namespace mla::quant {
namespace {

// ---- Q6_0 -----------------------------------------------------------------------------------

// x ≈ scale * l, l in [-32, 31], weights w. Returns the scale; L holds l + 32.
float fit_q6_0(const float* x, const float* w, int8_t* L) {
  constexpr int n = kQK, nmax = 32;
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  if (amax < 1e-15f) {
    std::fill(L, L + n, int8_t{0});
    return 0.f;
  }
  auto level = [&](float inv, int i) { return std::clamp(nearest_int(inv * x[i]), -nmax, nmax - 1); };
  auto sums = [&](float inv, float& sum_lx, float& sum_l2) {
    sum_lx = sum_l2 = 0;
    for (int i = 0; i < n; ++i) {
      const auto l = static_cast<float>(level(inv, i));
      sum_lx += w[i] * x[i] * l;
      sum_l2 += w[i] * l * l;
    }
  };
  float inv = -nmax / max;
  float sum_lx, sum_l2;
  sums(inv, sum_lx, sum_l2);
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(level(inv, i) + nmax);
  float scale = sum_l2 != 0 ? sum_lx / sum_l2 : 0.f;
  float best = scale * sum_lx;
  float best_lx = sum_lx, best_l2 = sum_l2;
  for (int k = -9; k <= 9; ++k) {
    for (float base : {static_cast<float>(-nmax), static_cast<float>(nmax - 1)}) {
      // -(nmax + 0.1 k) / max, then (nmax - 1 + 0.1 k) / max.
      inv = base < 0 ? -(nmax + 0.1f * static_cast<float>(k)) / max : (base + 0.1f * static_cast<float>(k)) / max;
      sums(inv, sum_lx, sum_l2);
      if (sum_l2 > 0 && sum_lx * sum_lx > best * sum_l2) {
        for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(level(inv, i) + nmax);
        scale = sum_lx / sum_l2;
        best = scale * sum_lx;
        best_lx = sum_lx;
        best_l2 = sum_l2;
      }
    }
  }
  // Greedy refinement: move the element with the largest error gradient one level, while that
  // raises the explained energy.
  sum_lx = best_lx;
  sum_l2 = best_l2;
  for (int iter = 0; iter < n * (2 * nmax - 1); ++iter) {
    float abs_gmax = 0, gmax = 0;
    int best_j = -1;
    for (int j = 0; j < n; ++j) {
      const int l = L[j] - nmax;
      const float g = scale * w[j] * (x[j] - scale * static_cast<float>(l));
      if ((g > 0 && l < nmax - 1) || (g < 0 && l > -nmax)) {
        if (std::fabs(g) > abs_gmax) {
          abs_gmax = std::fabs(g);
          gmax = g;
          best_j = j;
        }
      }
    }
    if (best_j < 0) break;
    float new_lx = sum_lx, new_l2 = sum_l2;
    int l = L[best_j] - nmax;
    const float wj = w[best_j];
    if (gmax > 0) {
      new_lx += wj * x[best_j];
      new_l2 += wj * static_cast<float>(2 * l + 1);
      ++l;
    } else {
      new_lx -= wj * x[best_j];
      new_l2 -= wj * static_cast<float>(2 * l - 1);
      --l;
    }
    if (!(new_l2 > 0 && new_lx * new_lx > best * new_l2)) break;
    sum_lx = new_lx;
    sum_l2 = new_l2;
    scale = sum_lx / sum_l2;
    best = scale * sum_lx;
    L[best_j] = static_cast<int8_t>(l + nmax);
  }
  return scale;
}

void quantize_q6_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ6_0*>(dst);
  float w[kQK];
  int8_t L[kQK];
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    for (int j = 0; j < kQK; ++j) w[j] = x[j] * x[j];
    y[i].d = fp32_to_fp16(fit_q6_0(x, w, L));
    std::memset(y[i].qh, 0, sizeof(y[i].qh));
    for (int j = 0; j < 16; ++j) {
      const auto lo = static_cast<uint8_t>(L[j]), hi = static_cast<uint8_t>(L[j + 16]);
      y[i].qs[j] = static_cast<uint8_t>((lo & 0xf) | (hi & 0xf) << 4);
      y[i].qh[j % 8] |= static_cast<uint8_t>(((lo >> 4) | (hi >> 4) << 2) << (4 * (j / 8)));
    }
  }
}

// ---- the non-linear level types ------------------------------------------------------------

// A level table of n_levels ascending values (its shifted twin follows it in memory) and the
// bucket index ik_llama.cpp searches it with: entry ix answers for the values whose integer part
// (truncated toward zero) is values[0] + ix: the nearest level's index, or n_levels + k where a
// midpoint between levels k and k+1 lies within 1 of that integer (then the two are compared).
// The same buckets serve the twin, whose levels are the table's shifted by a constant.
template <int NLevels, int NBuckets>
struct LevelIndex {
  const int8_t* values;
  std::array<uint8_t, NBuckets> bucket{};

  explicit LevelIndex(const int8_t* v) : values(v) {
    for (int ix = 0; ix < NBuckets; ++ix) {
      const float at = static_cast<float>(ix + values[0]);
      int k_mid = -1;
      for (int k = 0; k + 1 < NLevels; ++k)
        if (std::fabs(at - 0.5f * static_cast<float>(values[k] + values[k + 1])) < 1.f) k_mid = k;
      if (k_mid >= 0) {
        bucket[ix] = static_cast<uint8_t>(NLevels + k_mid);
        continue;
      }
      int best = 0;
      for (int k = 1; k < NLevels; ++k)
        if (std::fabs(at - values[k]) < std::fabs(at - values[best])) best = k;
      bucket[ix] = static_cast<uint8_t>(best);
    }
  }

  // Index of the level of `table` (this table or its shifted twin) nearest to x.
  int nearest(const int8_t* table, float x) const {
    int ix = static_cast<int>(x) - table[0];
    if (ix < 0 || ix >= NBuckets) return ix < 0 ? 0 : NLevels - 1;
    ix = bucket[ix];
    if (ix < NLevels) return ix;
    return x - table[ix - NLevels] < table[ix - NLevels + 1] - x ? ix - NLevels : ix - NLevels + 1;
  }
};

using Index4 = LevelIndex<16, 241>;
using Index5 = LevelIndex<32, 247>;

const Index4& index4() {
  static const Index4 idx(kIQ4KValues);
  return idx;
}
const Index5& index5() {
  static const Index5 idx(kIQ5NLValues);
  return idx;
}

// Weighted least-squares sums of x against levels table[nearest(inv * x)] (p) and against the
// mirrored grid table[nearest(-inv * x)] (m).
struct FitSums {
  float qx_p = 0, q2_p = 0, qx_m = 0, q2_m = 0;
};
template <typename Index>
FitSums fit_sums(const Index& idx, const int8_t* table, const float* x, const float* w, int n, float inv) {
  FitSums s;
  for (int j = 0; j < n; ++j) {
    const float al = inv * x[j];
    float q = table[idx.nearest(table, al)];
    s.qx_p = std::fma(w[j] * q, x[j], s.qx_p);
    s.q2_p = std::fma(w[j] * q, q, s.q2_p);
    q = table[idx.nearest(table, -al)];
    s.qx_m = std::fma(w[j] * q, x[j], s.qx_m);
    s.q2_m = std::fma(w[j] * q, q, s.q2_m);
  }
  return s;
}

// The group scale search: returns the scale (0 for a group of near-zeros) and whether the
// shifted table won.
template <typename Index>
float search_group(const Index& idx, int n_levels, const float* x, const float* w, int n, int ntry, bool* shifted) {
  *shifted = false;
  float amax = 0, max = 0;
  for (int j = 0; j < n; ++j)
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  if (amax < 1e-16f) return 0.f;
  const int8_t* values = idx.values;
  const int8_t* twin = values + n_levels;
  float d = -max / values[0];
  FitSums s = fit_sums(idx, values, x, w, n, 1 / d);
  d = s.qx_p / s.q2_p;
  float best = d * s.qx_p;
  if (s.q2_m > 0 && s.qx_m * s.qx_m > best * s.q2_m) {
    d = s.qx_m / s.q2_m;
    best = d * s.qx_m;
  }
  for (int itry = -ntry; itry <= ntry; ++itry) {
    for (int t = 0; t < 2; ++t) {
      const int8_t* table = t == 0 ? values : twin;
      s = fit_sums(idx, table, x, w, n, static_cast<float>(itry + table[0]) / max);
      if (s.q2_p > 0 && s.qx_p * s.qx_p > best * s.q2_p) {
        d = s.qx_p / s.q2_p;
        best = d * s.qx_p;
        *shifted = t == 1;
      }
      if (s.q2_m > 0 && s.qx_m * s.qx_m > best * s.q2_m) {
        d = s.qx_m / s.q2_m;
        best = d * s.qx_m;
        *shifted = t == 1;
      }
    }
  }
  return d;
}

void quantize_iq4_k(const float* x, void* dst, int64_t n) {
  const Index4& idx = index4();
  auto* y = static_cast<BlockIQ4_K*>(dst);
  float w[16], scales[16];
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    BlockIQ4_K& b = y[i];
    std::memset(&b, 0, sizeof(b));
    float max_scale = 0, amax_scale = 0;
    for (int g = 0; g < 16; ++g) {
      const float* xb = x + 16 * g;
      for (int j = 0; j < 16; ++j) w[j] = xb[j] * xb[j];
      bool shifted = false;
      scales[g] = search_group(idx, 16, xb, w, 16, 7, &shifted);
      if (shifted) b.extra |= static_cast<uint16_t>(1u << g);
      if (std::fabs(scales[g]) > amax_scale) {
        amax_scale = std::fabs(scales[g]);
        max_scale = scales[g];
      }
    }
    const float d = -max_scale / 32;
    b.d = fp32_to_fp16(d);
    const float id = d != 0 ? 1 / d : 0.f;
    float sum_qx = 0, sum_q2 = 0;
    for (int g = 0; g < 16; ++g) {
      const int8_t* table = kIQ4KValues + ((b.extra >> g) & 1 ? 16 : 0);
      const int l = std::clamp(nearest_int(id * scales[g]), -32, 31);
      const float dl = d * static_cast<float>(l);
      const float idl = dl != 0 ? 1 / dl : 0.f;
      const float* xb = x + 16 * g;
      for (int j = 0; j < 16; ++j) {
        L[16 * g + j] = static_cast<uint8_t>(idx.nearest(table, idl * xb[j]));
        const float wj = xb[j] * xb[j];
        const auto q = static_cast<float>(table[L[16 * g + j]] * l);
        sum_qx = std::fma(wj * q, xb[j], sum_qx);
        sum_q2 = std::fma(wj * q, q, sum_q2);
      }
      const int ls = l + 32;
      b.scales_l[g / 2] |= static_cast<uint8_t>((ls & 0xf) << (4 * (g % 2)));
      b.scales_h[g / 4] |= static_cast<uint8_t>((ls >> 4) << (2 * (g % 4)));
    }
    if (sum_q2 > 0) b.d = fp32_to_fp16(sum_qx / sum_q2);
    for (int s = 0; s < 8; ++s)
      for (int j = 0; j < 16; ++j) b.qs[16 * s + j] = static_cast<uint8_t>(L[32 * s + j] | L[32 * s + 16 + j] << 4);
  }
}

// IQ4_KS and IQ5_KS: a row scale over groups of 32 with 7-bit scales; Block has scales[8] (bit 0:
// shifted table, bits 1-7: the scale) and its own index packing (Store).
template <typename Block, typename Index, typename Store>
void quantize_row_scaled(const Index& idx, int n_levels, int ntry, const float* x, void* dst, int64_t n, Store store) {
  auto* row_d = static_cast<float*>(dst);
  auto* y = reinterpret_cast<Block*>(static_cast<uint8_t*>(dst) + 4);
  const int64_t n_blocks = n / kQK_K;
  std::vector<float> scales(static_cast<size_t>(n / 32));
  float w[32];
  float amax_scale = 0;
  for (int64_t i = 0; i < n_blocks; ++i) {
    std::memset(&y[i], 0, sizeof(Block));
    for (int g = 0; g < 8; ++g) {
      const float* xb = x + i * kQK_K + 32 * g;
      for (int j = 0; j < 32; ++j) w[j] = xb[j] * xb[j];
      bool shifted = false;
      const float d = search_group(idx, n_levels, xb, w, 32, ntry, &shifted);
      scales[i * 8 + g] = d;
      if (shifted) y[i].scales[g] = 1;
      amax_scale = std::max(amax_scale, std::fabs(d));
    }
  }
  const float d = amax_scale / 127;
  *row_d = d;
  if (d == 0) return;
  const float id = 1 / d;
  float sum_qx = 0, sum_q2 = 0;
  for (int64_t i = 0; i < n_blocks; ++i) {
    for (int g = 0; g < 8; ++g) {
      const int8_t* table = idx.values + (y[i].scales[g] & 1 ? n_levels : 0);
      int l = std::clamp(nearest_int(0.5f * std::fma(id, scales[i * 8 + g], 127.f)), 0, 127) << 1;
      y[i].scales[g] |= static_cast<uint8_t>(l);
      l -= 127;
      const float dl = d * static_cast<float>(l);
      const float idl = dl != 0 ? 1 / dl : 0.f;
      const float* xb = x + i * kQK_K + 32 * g;
      store(
          y[i], g, [&](int j) { return idx.nearest(table, idl * xb[j]); }, table, l, xb, sum_qx, sum_q2);
    }
  }
  if (sum_q2 > 0) *row_d = sum_qx / sum_q2;
}

void quantize_iq4_ks(const float* x, void* dst, int64_t n) {
  quantize_row_scaled<BlockIQ4_KS>(index4(), 16, 7, x, dst, n,
                                   [](BlockIQ4_KS& b, int g, auto nearest, const int8_t* table, int l, const float* xb,
                                      float& sum_qx, float& sum_q2) {
                                     for (int j = 0; j < 16; ++j) {
                                       const int i1 = nearest(j), i2 = nearest(j + 16);
                                       b.qs[16 * g + j] = static_cast<uint8_t>(i1 | i2 << 4);
                                       const float w1 = xb[j] * xb[j], w2 = xb[j + 16] * xb[j + 16];
                                       const auto q1 = static_cast<float>(table[i1] * l),
                                                  q2 = static_cast<float>(table[i2] * l);
                                       // Two products summed, then added: the first of each pair fused with the second.
                                       sum_qx += std::fma(w1 * q1, xb[j], w2 * q2 * xb[j + 16]);
                                       sum_q2 += std::fma(w1 * q1, q1, w2 * q2 * q2);
                                     }
                                   });
}

void quantize_iq5_ks(const float* x, void* dst, int64_t n) {
  quantize_row_scaled<BlockIQ5_KS>(index5(), 32, 5, x, dst, n,
                                   [](BlockIQ5_KS& b, int g, auto nearest, const int8_t* table, int l, const float* xb,
                                      float& sum_qx, float& sum_q2) {
                                     for (int j = 0; j < 32; ++j) {
                                       const int i = nearest(j);
                                       b.qs[32 * (g / 2) + j] |= static_cast<uint8_t>((i & 0xf) << (4 * (g % 2)));
                                       b.qh[j] |= static_cast<uint8_t>((i >> 4) << g);
                                       const float wj = xb[j] * xb[j];
                                       const auto q = static_cast<float>(table[i] * l);
                                       sum_qx = std::fma(wj * q, xb[j], sum_qx);
                                       sum_q2 = std::fma(wj * q, q, sum_q2);
                                     }
                                   });
}

}  // namespace

QuantizeFn quantize_iqk_ref_fn(GgmlType t) {
  switch (t) {
    case GgmlType::Q6_0:
      return quantize_q6_0;
    case GgmlType::IQ4_K:
      return quantize_iq4_k;
    case GgmlType::IQ4_KS:
      return quantize_iq4_ks;
    case GgmlType::IQ5_KS:
      return quantize_iq5_ks;
    default:
      return nullptr;
  }
}

}  // namespace mla::quant
