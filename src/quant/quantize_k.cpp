// K-quant quantizers (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) without an importance matrix.
//
// The algorithm is llama.cpp's reference one, written from its description:
//  1. For each sub-block, search a scale (and for Q4_K/Q5_K an offset) that minimises the
//     weighted squared error, by trying a small fan of candidate grids around max-min/nmax and
//     solving the least-squares scale/offset for the integer levels each grid produces.
//  2. Quantize the per-sub-block scales (and offsets) themselves to 6 or 8 bits against one
//     fp16 super-block scale.
//  3. Re-round every element against the scale it will actually be decoded with.
// Sums and products round separately (no FMA contraction), as in ggml's portable build, so the
// output matches llama.cpp's reference quantizer.
#include "quant/kernels.h"
MLA_NO_FP_CONTRACT

#include <algorithm>
#include <cmath>
#include <cstring>

#include "util/ggml_blocks.h"

namespace mla::quant {
namespace {

// Fits x[i] ≈ scale * L[i] - neg_min with integer L[i] in [0, nmax] and neg_min >= 0 (an offset
// that is never positive: K-quants store it as a subtracted minimum), minimising
// sum w[i] * err[i]^2. Candidate grids have inverse scale (nmax + rmin + rdelta*k) / (max - o)
// and origin o for k = 0..nstep, where o is the best offset found so far (initially min(x, 0)):
// once a fit improves, later grids start from the fitted offset, which lets the search walk
// (this is what llama.cpp's reference does, and it measurably lowers the error). For each grid
// the levels are rounded and the optimal (scale, offset) is solved in closed form from the 2x2
// normal equations. Returns scale; writes the best levels to L.
// With abs_error the error is sum w[i] * |err[i]| instead (Q2_K's choice: with 4 levels the
// squared error lets a few large values pull the whole grid).
float fit_scale_offset(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min, float rmin,
                       float rdelta, int nstep, bool abs_error = false) {
  float lo = x[0], hi = x[0];
  float sum_w = 0, sum_wx = 0;
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sum_w += w[i];
    sum_wx += w[i] * x[i];
  }
  lo = std::min(lo, 0.0f);  // the offset may only pull values down
  if (hi == lo) {
    std::fill(L, L + n, uint8_t{0});
    *neg_min = -lo;
    return 0.0f;
  }

  auto weighted_error = [&](const uint8_t* levels, float scale, float offset) {
    float err = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = scale * levels[i] + offset - x[i];
      err += w[i] * (abs_error ? std::fabs(diff) : diff * diff);
    }
    return err;
  };

  // Start from the plain min/max grid.
  float inv = nmax / (hi - lo);
  float best_scale = 1 / inv, best_offset = lo;
  for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(std::clamp(nearest_int(inv * (x[i] - lo)), 0, nmax));
  float best_err = weighted_error(L, best_scale, best_offset);

  uint8_t trial[32];
  for (int k = 0; k <= nstep; ++k) {
    inv = (rmin + rdelta * k + nmax) / (hi - best_offset);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(inv * (x[i] - best_offset)), 0, nmax);
      trial[i] = static_cast<uint8_t>(l);
      sum_l += w[i] * l;
      sum_l2 += w[i] * l * l;
      sum_xl += w[i] * l * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det <= 0) continue;
    float scale = (sum_w * sum_xl - sum_wx * sum_l) / det;
    float offset = (sum_l2 * sum_wx - sum_l * sum_xl) / det;
    if (offset > 0) {  // not representable: refit the scale alone with a zero offset
      offset = 0;
      scale = sum_xl / sum_l2;
    }
    const float err = weighted_error(trial, scale, offset);
    if (err < best_err) {
      std::memcpy(L, trial, n);
      best_err = err;
      best_scale = scale;
      best_offset = offset;
    }
  }
  *neg_min = -best_offset;
  return best_scale;
}

// The value of largest magnitude (the first of equal ones), and that magnitude in amax.
float largest_magnitude(int n, const float* x, float& amax) {
  float max = 0;
  amax = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  return max;
}

// Fits x[i] ≈ scale * l[i] with integer l in [-nmax, nmax-1], weights x[i]^2, by trying inverse
// scales -(nmax + 0.1*k)/max for k = -9..9 (max: the value of largest magnitude) and keeping the
// one whose least-squares scale explains the most weighted energy. Returns the scale; L holds
// l + nmax. A group of (near) zeros gets scale 0.
float fit_symmetric_scale(int n, int nmax, const float* x, uint8_t* L) {
  float amax = 0;
  const float max = largest_magnitude(n, x, amax);
  if (amax < 1e-15f) {
    std::fill(L, L + n, uint8_t{0});
    return 0.0f;
  }
  auto level = [&](float inv, int i) { return std::clamp(nearest_int(inv * x[i]), -nmax, nmax - 1); };
  // Least squares for a fixed grid: scale = sum(w x l) / sum(w l^2), explained energy
  // sum(w x l)^2 / sum(w l^2); compare energies without dividing.
  auto sums = [&](float inv, float* sum_lx, float* sum_l2) {
    *sum_lx = *sum_l2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = level(inv, i);
      const float w = x[i] * x[i];
      *sum_lx += w * x[i] * l;
      *sum_l2 += w * l * l;
    }
  };
  float inv = -nmax / max;
  float sum_lx, sum_l2;
  sums(inv, &sum_lx, &sum_l2);
  float best_inv = inv;
  float scale = sum_l2 != 0 ? sum_lx / sum_l2 : 0.0f;
  float best_energy = scale * sum_lx;
  for (int k = -9; k <= 9; ++k) {
    if (k == 0) continue;
    inv = -(nmax + 0.1f * k) / max;
    sums(inv, &sum_lx, &sum_l2);
    if (sum_l2 > 0 && sum_lx * sum_lx > best_energy * sum_l2) {
      best_inv = inv;
      scale = sum_lx / sum_l2;
      best_energy = scale * sum_lx;
    }
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(level(best_inv, i) + nmax);
  return scale;
}

// Steps 1-2 for Q4_K and Q5_K (8 sub-blocks of 32): fills d, dmin and the packed 6-bit scales,
// and L with the final levels in [0, nmax].
template <typename Block>
void quantize_k_affine(const float* x, Block* b, uint8_t* L, int nmax, float rmin, float rdelta, int nstep) {
  float scales[8], mins[8], w[32];
  float max_scale = 0, max_min = 0;
  for (int s = 0; s < 8; ++s) {
    const float* xs = x + 32 * s;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float rms = std::sqrt(sum_x2 / 32);
    // Weight large-magnitude elements more: their error dominates the matmul output.
    for (int l = 0; l < 32; ++l) w[l] = rms + std::fabs(xs[l]);
    scales[s] = fit_scale_offset(32, nmax, xs, w, L + 32 * s, &mins[s], rmin, rdelta, nstep);
    max_scale = std::max(max_scale, scales[s]);
    max_min = std::max(max_min, mins[s]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  uint8_t q_scales[8], q_mins[8];
  for (int s = 0; s < 8; ++s) {
    q_scales[s] = static_cast<uint8_t>(std::min(63, nearest_int(inv_scale * scales[s])));
    q_mins[s] = static_cast<uint8_t>(std::min(63, nearest_int(inv_min * mins[s])));
  }
  pack_k4_scales(q_scales, q_mins, b->scales);
  b->d = fp32_to_fp16(max_scale / 63.0f);
  b->dmin = fp32_to_fp16(max_min / 63.0f);

  // Step 3: levels against the decoded scales.
  const float d = fp16_to_fp32(b->d), dmin = fp16_to_fp32(b->dmin);
  for (int s = 0; s < 8; ++s) {
    const float ds = d * q_scales[s];
    if (ds == 0.0f) continue;  // keep the search's levels; they decode to -dm either way
    const float dm = dmin * q_mins[s];
    for (int l = 0; l < 32; ++l)
      L[32 * s + l] = static_cast<uint8_t>(std::clamp(nearest_int((x[32 * s + l] + dm) / ds), 0, nmax));
  }
}

// Q3_K's symmetric fit: levels l in [-nmax, nmax-1] start from the grid that maps the value of
// largest magnitude to -nmax, then up to 5 sweeps move single elements to the level the current
// least-squares scale prefers, keeping a move only when it raises the explained weighted energy
// sum(w x l)^2 / sum(w l^2) (weights x^2). Returns the scale; L holds l + nmax.
float fit_symmetric_scale_sweeps(int n, int nmax, const float* x, uint8_t* L) {
  float amax = 0;
  const float max = largest_magnitude(n, x, amax);
  if (amax < 1e-15f) {
    std::fill(L, L + n, uint8_t{0});
    return 0.0f;
  }
  const float inv = -nmax / max;
  int l_of[32];
  float sum_lx = 0, sum_l2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(nearest_int(inv * x[i]), -nmax, nmax - 1);
    l_of[i] = l;
    const float w = x[i] * x[i];
    sum_lx += w * x[i] * l;
    sum_l2 += w * l * l;
  }
  for (int sweep = 0; sweep < 5; ++sweep) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sum_lx - w * x[i] * l_of[i];
      if (slx <= 0) continue;
      float sl2 = sum_l2 - w * l_of[i] * l_of[i];
      const int new_l = std::clamp(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
      if (new_l == l_of[i]) continue;
      slx += w * x[i] * new_l;
      sl2 += w * new_l * new_l;
      if (sl2 > 0 && slx * slx * sum_l2 > sum_lx * sum_lx * sl2) {
        l_of[i] = new_l;
        sum_lx = slx;
        sum_l2 = sl2;
        ++n_changed;
      }
    }
    if (n_changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(l_of[i] + nmax);
  return sum_l2 > 0.0f ? sum_lx / sum_l2 : 0.0f;
}

// Q2_K / Q3_K keep 2 low bits per element: element 128h + 32k + l at bits 2k of qs[32h + l].
void pack_2bit_levels(const uint8_t* L, uint8_t* qs) {
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const uint8_t* e = L + 128 * h + l;
      qs[32 * h + l] = static_cast<uint8_t>((e[0] & 3) | (e[32] & 3) << 2 | (e[64] & 3) << 4 | (e[96] & 3) << 6);
    }
}

}  // namespace

// 16 sub-blocks of 16 with a scale and a subtracted minimum each (4 bits each, against fp16 d and
// dmin); the fit weights each element by |x| and minimises the weighted absolute error.
void quantize_q2_k_ref(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ2_K*>(dst);
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float scales[16], mins[16], w[16];
    float max_scale = 0, max_min = 0;
    for (int s = 0; s < 16; ++s) {
      for (int l = 0; l < 16; ++l) w[l] = std::fabs(x[16 * s + l]);
      scales[s] = fit_scale_offset(16, 3, x + 16 * s, w, L + 16 * s, &mins[s], -0.5f, 0.1f, 15, true);
      max_scale = std::max(max_scale, scales[s]);
      max_min = std::max(max_min, mins[s]);
    }
    // The nibbles are not clamped: the largest maps to exactly 15, the others below it.
    if (max_scale > 0) {
      const float inv = 15.0f / max_scale;
      for (int s = 0; s < 16; ++s) b[i].scales[s] = static_cast<uint8_t>(nearest_int(inv * scales[s]));
      b[i].d = fp32_to_fp16(max_scale / 15.0f);
    } else {
      std::memset(b[i].scales, 0, sizeof b[i].scales);
      b[i].d = fp32_to_fp16(0.0f);
    }
    if (max_min > 0) {
      const float inv = 15.0f / max_min;
      for (int s = 0; s < 16; ++s) b[i].scales[s] |= static_cast<uint8_t>(nearest_int(inv * mins[s]) << 4);
      b[i].dmin = fp32_to_fp16(max_min / 15.0f);
    } else {
      b[i].dmin = fp32_to_fp16(0.0f);
    }
    for (int s = 0; s < 16; ++s) {
      const float ds = fp16_to_fp32(b[i].d) * static_cast<float>(b[i].scales[s] & 0xF);
      if (ds == 0.0f) continue;
      const float dm = fp16_to_fp32(b[i].dmin) * static_cast<float>(b[i].scales[s] >> 4);
      for (int l = 0; l < 16; ++l)
        L[16 * s + l] = static_cast<uint8_t>(std::clamp(nearest_int((x[16 * s + l] + dm) / ds), 0, 3));
    }
    pack_2bit_levels(L, b[i].qs);
  }
}

// 16 sub-blocks of 16 with a signed 6-bit scale each against fp16 d; levels -4..3 kept as 2 low
// bits plus a high bit (hmask: set = level >= 0).
void quantize_q3_k_ref(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ3_K*>(dst);
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float scales[16];
    float max_scale = 0, amax = 0;
    for (int s = 0; s < 16; ++s) {
      scales[s] = fit_symmetric_scale_sweeps(16, 4, x + 16 * s, L + 16 * s);
      if (std::fabs(scales[s]) > amax) {
        amax = std::fabs(scales[s]);
        max_scale = scales[s];
      }
    }
    std::memset(b[i].scales, 0, sizeof b[i].scales);
    if (max_scale != 0.0f) {
      const float inv = -32.0f / max_scale;
      for (int s = 0; s < 16; ++s) {
        const int l = std::clamp(static_cast<int>(static_cast<int8_t>(nearest_int(inv * scales[s]))), -32, 31) + 32;
        b[i].scales[s % 8] |= static_cast<uint8_t>((l & 0xF) << (4 * (s / 8)));
        b[i].scales[8 + s % 4] |= static_cast<uint8_t>((l >> 4) << (2 * (s / 4)));
      }
      b[i].d = fp32_to_fp16(1 / inv);
    } else {
      b[i].d = fp32_to_fp16(0.0f);
    }
    int8_t q_scales[16];
    unpack_q3_k_scales(b[i].scales, q_scales);
    for (int s = 0; s < 16; ++s) {
      const float ds = fp16_to_fp32(b[i].d) * static_cast<float>(q_scales[s]);
      if (ds == 0.0f) continue;
      for (int l = 0; l < 16; ++l)
        L[16 * s + l] = static_cast<uint8_t>(std::clamp(nearest_int(x[16 * s + l] / ds), -4, 3) + 4);
    }
    // Element e's high bit: bit e/32 of hmask[e%32].
    std::memset(b[i].hmask, 0, sizeof b[i].hmask);
    for (int e = 0; e < kQK_K; ++e)
      if (L[e] > 3) {
        b[i].hmask[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
        L[e] -= 4;
      }
    pack_2bit_levels(L, b[i].qs);
  }
}

void quantize_q4_k_ref(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ4_K*>(dst);
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    quantize_k_affine(x, &b[i], L, 15, -1.0f, 0.1f, 20);
    // Sub-blocks 2c and 2c+1 share qs[32c .. 32c+31]: low and high nibble.
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l)
        b[i].qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
  }
}

void quantize_q5_k_ref(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ5_K*>(dst);
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    quantize_k_affine(x, &b[i], L, 31, -0.5f, 0.1f, 15);
    std::memset(b[i].qh, 0, sizeof b[i].qh);
    for (int s = 0; s < 8; ++s)
      for (int l = 0; l < 32; ++l) b[i].qh[l] |= static_cast<uint8_t>((L[32 * s + l] >> 4) << s);
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l)
        b[i].qs[32 * c + l] = static_cast<uint8_t>((L[64 * c + l] & 0x0F) | ((L[64 * c + 32 + l] & 0x0F) << 4));
  }
}

void quantize_q6_k_ref(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ6_K*>(dst);
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float scales[16];
    float max_scale = 0, max_abs_scale = 0;
    for (int g = 0; g < 16; ++g) {
      scales[g] = fit_symmetric_scale(16, 32, x + 16 * g, L + 16 * g);
      if (std::fabs(scales[g]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[g]);
        max_scale = scales[g];
      }
    }
    if (max_abs_scale < 1e-15f) {
      std::memset(&b[i], 0, sizeof(BlockQ6_K));
      continue;
    }
    // The largest scale maps to -128 so the int8 scales use their full range.
    const float inv = -128.0f / max_scale;
    b[i].d = fp32_to_fp16(1 / inv);
    for (int g = 0; g < 16; ++g) b[i].scales[g] = static_cast<int8_t>(std::min(127, nearest_int(inv * scales[g])));
    const float d = fp16_to_fp32(b[i].d);
    for (int g = 0; g < 16; ++g) {
      const float dg = d * b[i].scales[g];
      if (dg == 0.0f) continue;
      for (int l = 0; l < 16; ++l)
        L[16 * g + l] = static_cast<uint8_t>(std::clamp(nearest_int(x[16 * g + l] / dg), -32, 31) + 32);
    }
    // Element 128h + r: low nibble (r/64) of ql[64h + r%64], high bits at 2*(r/32) of qh[32h + r%32].
    std::memset(b[i].ql, 0, sizeof b[i].ql);
    std::memset(b[i].qh, 0, sizeof b[i].qh);
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, r = e % 128;
      b[i].ql[64 * h + r % 64] |= static_cast<uint8_t>((L[e] & 0x0F) << (4 * (r / 64)));
      b[i].qh[32 * h + r % 32] |= static_cast<uint8_t>((L[e] >> 4) << (2 * (r / 32)));
    }
  }
}

}  // namespace mla::quant
