// Quantizers for the lattice i-quants IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and IQ1_M,
// without an importance matrix. Our own search (llama.cpp requires an importance matrix for
// several of these, so its bytes are not a target); the formats are described in iquants.cpp.
//
// Per 256-value super-block:
//  1. Weights w = sqrt(sigma^2 + x^2) (sigma^2: twice the mean square): large values count more,
//     small ones are not ignored.
//  2. Per sub-block (the values one scale code covers), a fan of candidate scales around the one
//     that maps the largest |x| onto the grid's largest level; for each, every group of 8 takes
//     the grid point nearest (by weighted error) to x/scale, and the least-squares scale for those
//     points is solved; the candidate explaining the most weighted energy wins, and its points are
//     searched once more at its least-squares scale.
//  3. The sub-block scales become odd multiples (2s+1) of one fp16 d (the largest fills the code
//     range), the points are searched again at the scales as stored, and d is refitted by least
//     squares over the super-block.
// The nearest grid point: each coordinate is rounded to the nearest grid level, which names a
// point of the full product lattice (3^8 or 8^4 points); a table built once per type lists, for
// each of those, the grid points within a small distance of the nearest one, and the weighted
// error picks among them.
// Sign rules: IQ2_XXS, IQ2_XS and IQ3_XXS store 7 sign bits per 8 values, so the number of
// negative values must be even; when it is odd, the value whose flip costs least (w |x| q) is
// flipped. IQ1 grid points are signed (-1, 0, 1) and carry a shift of ±1/8: per 32 values in
// IQ1_S (both tried per sub-block), per 8 in IQ1_M (both tried per group).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "quant/iq_grids.h"
#include "quant/kernels.h"
#include "util/ggml_blocks.h"

namespace mla::quant {
namespace {

constexpr float kIQ1Delta = 0.125f;

// One grid of points of `dim` coordinates, with the neighbour table described above.
struct Lattice {
  int dim = 0;
  std::vector<int8_t> coords;    // n_points x dim
  std::vector<float> levels;     // the distinct coordinate values, ascending
  std::vector<float> midpoints;  // between consecutive levels
  std::vector<uint32_t> first;   // lattice index -> [first[i], first[i+1]) in candidates
  std::vector<uint16_t> candidates;

  template <typename T>
  Lattice(const T* grid, int n_points, int dim_) : dim(dim_), coords(static_cast<size_t>(n_points) * dim_) {
    for (int p = 0; p < n_points; ++p)
      for (int j = 0; j < dim; ++j) coords[p * dim + j] = static_cast<int8_t>(grid[p] >> (8 * j));
    for (int8_t c : coords)
      if (std::find(levels.begin(), levels.end(), c) == levels.end()) levels.push_back(c);
    std::sort(levels.begin(), levels.end());
    for (size_t k = 0; k + 1 < levels.size(); ++k) midpoints.push_back(0.5f * (levels[k] + levels[k + 1]));
    const int n_levels = static_cast<int>(levels.size());
    int n_lattice = 1;
    for (int j = 0; j < dim; ++j) n_lattice *= n_levels;
    // Distance slack, in squared coordinate units: one step of the level spacing.
    const float step = levels[1] - levels[0];
    const float slack = step * step * 1.01f;
    first.reserve(n_lattice + 1);
    std::vector<float> dist(n_points);
    float target[8];
    for (int li = 0; li < n_lattice; ++li) {
      first.push_back(static_cast<uint32_t>(candidates.size()));
      for (int j = 0, r = li; j < dim; ++j, r /= n_levels) target[j] = levels[r % n_levels];
      float best = 1e30f;
      for (int p = 0; p < n_points; ++p) {
        float d2 = 0;
        for (int j = 0; j < dim; ++j) {
          const float diff = target[j] - coords[p * dim + j];
          d2 += diff * diff;
        }
        dist[p] = d2;
        best = std::min(best, d2);
      }
      // A lattice point on the grid is its own best answer (per-coordinate rounding is optimal).
      const float limit = best == 0 ? 0 : best + slack;
      for (int p = 0; p < n_points; ++p)
        if (dist[p] <= limit) candidates.push_back(static_cast<uint16_t>(p));
    }
    first.push_back(static_cast<uint32_t>(candidates.size()));
  }

  // The number of level midpoints below v: the nearest level's index.
  int nearest_level(float v) const {
    int k = 0;
    for (float m : midpoints) k += v > m;
    return k;
  }

  // The grid point nearest to t (dim values) by sum w (t - p)^2.
  int nearest_point(const float* t, const float* w) const {
    int li = 0;
    for (int j = dim - 1; j >= 0; --j) li = li * static_cast<int>(levels.size()) + nearest_level(t[j]);
    int best = candidates[first[li]];
    if (first[li + 1] - first[li] == 1) return best;
    float best_err = 1e30f;
    for (uint32_t c = first[li]; c < first[li + 1]; ++c) {
      const int8_t* p = &coords[static_cast<size_t>(candidates[c]) * dim];
      float err = 0;
      for (int j = 0; j < dim; ++j) {
        const float diff = t[j] - p[j];
        err += w[j] * diff * diff;
      }
      if (err < best_err) {
        best_err = err;
        best = candidates[c];
      }
    }
    return best;
  }
};

struct Format {
  const Lattice* lattice;
  int sub;           // values per scale code: 16 or 32
  int s_max;         // largest scale code (stored scale = scale_unit * (2s+1))
  float scale_unit;  // dl = d * scale_unit * (2s + 1)
  bool even_signs;   // 7 stored sign bits per 8 values
  int shift_span;    // IQ1: values sharing a shift sign (32 or 8); 0: a sign grid
  float max_level() const { return lattice->levels.back(); }
};

// The choice for one group of 8 values.
struct Group {
  uint16_t index[2];  // grid point(s): one of 8 values or two of 4
  uint8_t signs;      // bit j set: value j negative (sign grids)
  int8_t shift;       // IQ1: +1 / -1 (times 1/8)
};

// Points for the 8 values x (weights w) at scale ds; returns the group's contributions to the
// least-squares sums sum(w x q) and sum(w q^2), q the decoded value over ds.
void fit_group(const Format& f, const float* x, const float* w, float ds, int8_t shift_hint, Group& g, float* sum_xq,
               float* sum_q2) {
  const Lattice& lat = *f.lattice;
  const float inv = ds > 0 ? 1 / ds : 0.0f;
  float q[8];
  if (f.shift_span == 0) {
    float t[8];
    g.signs = 0;
    for (int j = 0; j < 8; ++j) {
      t[j] = std::fabs(x[j]) * inv;
      if (x[j] < 0) g.signs |= static_cast<uint8_t>(1 << j);
    }
    for (int p = 0; p < 8 / lat.dim; ++p) {
      g.index[p] = static_cast<uint16_t>(lat.nearest_point(t + p * lat.dim, w + p * lat.dim));
      for (int j = 0; j < lat.dim; ++j) q[p * lat.dim + j] = lat.coords[g.index[p] * lat.dim + j];
    }
    if (f.even_signs && std::popcount(g.signs) % 2 == 1) {
      int flip = 0;
      float least = 1e30f;
      for (int j = 0; j < 8; ++j) {
        const float cost = w[j] * std::fabs(x[j]) * q[j];
        if (cost < least) least = cost, flip = j;
      }
      g.signs ^= static_cast<uint8_t>(1 << flip);
    }
    g.shift = 0;
    for (int j = 0; j < 8; ++j)
      if (g.signs >> j & 1) q[j] = -q[j];
  } else {
    // Try the hinted shift, or both when the group chooses its own (shift_hint == 0).
    float best_err = 1e30f;
    for (int8_t s : {int8_t{1}, int8_t{-1}}) {
      if (shift_hint != 0 && s != shift_hint) continue;
      const float delta = s * kIQ1Delta;
      float t[8];
      for (int j = 0; j < 8; ++j) t[j] = x[j] * inv - delta;
      const int idx = lat.nearest_point(t, w);
      float err = 0, qs[8];
      for (int j = 0; j < 8; ++j) {
        qs[j] = lat.coords[idx * 8 + j] + delta;
        const float diff = x[j] - ds * qs[j];
        err += w[j] * diff * diff;
      }
      if (err < best_err) {
        best_err = err;
        g.index[0] = static_cast<uint16_t>(idx);
        g.shift = s;
        std::memcpy(q, qs, sizeof q);
      }
    }
    g.signs = 0;
  }
  for (int j = 0; j < 8; ++j) {
    *sum_xq += w[j] * x[j] * q[j];
    *sum_q2 += w[j] * q[j] * q[j];
  }
}

// All groups of one sub-block at scale ds; IQ1_S tries both shift signs for the whole sub-block.
// Returns the explained weighted energy sum(w x q)^2 / sum(w q^2) of the chosen points and
// writes their sums (q: decoded value over ds).
float fit_sub_block(const Format& f, const float* x, const float* w, float ds, Group* groups, float* sum_xq_out,
                    float* sum_q2_out) {
  Group trial[4];
  float best_energy = -1;
  // IQ1_S: one shift sign for the whole sub-block, both tried; otherwise hint 0 (per group).
  const int8_t hints[2] = {static_cast<int8_t>(f.shift_span == f.sub ? 1 : 0), -1};
  for (int h = 0; h < (f.shift_span == f.sub ? 2 : 1); ++h) {
    const int8_t hint = hints[h];
    float sum_xq = 0, sum_q2 = 0;
    for (int k = 0; k < f.sub / 8; ++k) fit_group(f, x + 8 * k, w + 8 * k, ds, hint, trial[k], &sum_xq, &sum_q2);
    const float energy = sum_q2 > 0 && sum_xq > 0 ? sum_xq * sum_xq / sum_q2 : 0.0f;
    if (energy > best_energy) {
      best_energy = energy;
      *sum_xq_out = sum_xq;
      *sum_q2_out = sum_q2;
      std::copy(trial, trial + f.sub / 8, groups);
    }
  }
  return best_energy;
}

// Steps 1-3 for one super-block: the groups, the scale codes and d.
void quantize_super_block(const Format& f, const float* x, Group* groups, int* codes, float* d_out) {
  float w[kQK_K];
  float sum_x2 = 0;
  for (int j = 0; j < kQK_K; ++j) sum_x2 += x[j] * x[j];
  const float sigma2 = 2 * sum_x2 / kQK_K;
  for (int j = 0; j < kQK_K; ++j) w[j] = std::sqrt(sigma2 + x[j] * x[j]);

  const int n_sub = kQK_K / f.sub;
  float scales[kQK_K / 16];
  float max_scale = 0;
  // The fan of step 2, as factors of amax / max_level (IQ1's three levels want a wider one).
  const float lo = f.shift_span ? 0.55f : 0.8f, hi = f.shift_span ? 1.5f : 1.3f;
  const float top = f.max_level() + (f.shift_span ? kIQ1Delta : 0.0f);
  constexpr int kFan = 8;
  for (int s = 0; s < n_sub; ++s) {
    const float* xs = x + s * f.sub;
    const float* ws = w + s * f.sub;
    Group* gs = groups + s * f.sub / 8;
    float amax = 0;
    for (int j = 0; j < f.sub; ++j) amax = std::max(amax, std::fabs(xs[j]));
    scales[s] = 0;
    if (amax < 1e-12f) continue;
    float best_energy = -1, best_ls = 0, sum_xq, sum_q2;
    for (int k = 0; k < kFan; ++k) {
      const float ds = amax / top / (lo + (hi - lo) * static_cast<float>(k) / (kFan - 1));
      const float energy = fit_sub_block(f, xs, ws, ds, gs, &sum_xq, &sum_q2);
      if (energy > best_energy) best_energy = energy, best_ls = sum_q2 > 0 ? sum_xq / sum_q2 : 0.0f;
    }
    scales[s] = best_ls;
    if (best_ls > 0) {  // once more at the winner's least-squares scale
      fit_sub_block(f, xs, ws, best_ls, gs, &sum_xq, &sum_q2);
      if (sum_xq > 0 && sum_q2 > 0) scales[s] = sum_xq / sum_q2;
    }
    max_scale = std::max(max_scale, scales[s]);
  }
  if (max_scale <= 0) {
    *d_out = 0;
    for (int s = 0; s < n_sub; ++s) codes[s] = 0;
    for (int gi = 0; gi < kQK_K / 8; ++gi) groups[gi] = Group{{0, 0}, 0, 1};
    return;
  }
  // d * scale_unit * (2 s_max + 1) = max_scale; codes round (scale / (d * unit) - 1) / 2.
  const float d = fp16_to_fp32(fp32_to_fp16(max_scale / (2 * f.s_max + 1) / f.scale_unit));
  const float du = d * f.scale_unit;
  float sum_xq = 0, sum_q2 = 0;
  for (int s = 0; s < n_sub; ++s) {
    codes[s] = du > 0 ? std::clamp(nearest_int(0.5f * (scales[s] / du - 1)), 0, f.s_max) : 0;
    const float m = f.scale_unit * static_cast<float>(2 * codes[s] + 1);  // value = d * m * q
    float sxq = 0, sq2 = 0;
    fit_sub_block(f, x + s * f.sub, w + s * f.sub, d * m, groups + s * f.sub / 8, &sxq, &sq2);
    sum_xq += sxq * m;
    sum_q2 += sq2 * m * m;
  }
  *d_out = sum_q2 > 0 && sum_xq > 0 ? sum_xq / sum_q2 : d;
}

const Lattice& lattice(GgmlType t) {
  switch (t) {
    case GgmlType::IQ2_XXS: {
      static const Lattice l(kIQ2XXSGrid, 256, 8);
      return l;
    }
    case GgmlType::IQ2_XS: {
      static const Lattice l(kIQ2XSGrid, 512, 8);
      return l;
    }
    case GgmlType::IQ2_S: {
      static const Lattice l(kIQ2SGrid, 1024, 8);
      return l;
    }
    case GgmlType::IQ3_XXS: {
      static const Lattice l(kIQ3XXSGrid, 256, 4);
      return l;
    }
    case GgmlType::IQ3_S: {
      static const Lattice l(kIQ3SGrid, 512, 4);
      return l;
    }
    default: {
      static const Lattice l(kIQ1SGrid, 2048, 8);
      return l;
    }
  }
}

struct Packed {
  Group groups[kQK_K / 8];
  int codes[kQK_K / 16];
  uint16_t d;
};

Format format_of(GgmlType t) {
  const Lattice* l = &lattice(t);
  switch (t) {
    case GgmlType::IQ2_XXS:
      return {l, 32, 15, 0.125f, true, 0};
    case GgmlType::IQ2_XS:
      return {l, 16, 15, 0.125f, true, 0};
    case GgmlType::IQ2_S:
      return {l, 16, 15, 0.125f, false, 0};
    case GgmlType::IQ3_XXS:
      return {l, 32, 15, 0.25f, true, 0};
    case GgmlType::IQ3_S:
      return {l, 32, 15, 1.0f, false, 0};
    case GgmlType::IQ1_S:
      return {l, 32, 7, 1.0f, false, 32};
    default:  // IQ1_M
      return {l, 16, 7, 1.0f, false, 8};
  }
}

void pack(const Packed& p, BlockIQ2_XXS& b) {
  b.d = p.d;
  for (int ib = 0; ib < 8; ++ib) {
    uint32_t idx = 0, aux = static_cast<uint32_t>(p.codes[ib]) << 28;
    for (int l = 0; l < 4; ++l) {
      const Group& g = p.groups[4 * ib + l];
      idx |= static_cast<uint32_t>(g.index[0]) << (8 * l);
      aux |= static_cast<uint32_t>(g.signs & 127) << (7 * l);
    }
    std::memcpy(&b.qs[4 * ib], &idx, 4);
    std::memcpy(&b.qs[4 * ib + 2], &aux, 4);
  }
}

void pack(const Packed& p, BlockIQ2_XS& b) {
  b.d = p.d;
  for (int ib = 0; ib < 8; ++ib) {
    b.scales[ib] = static_cast<uint8_t>(p.codes[2 * ib] | p.codes[2 * ib + 1] << 4);
    for (int l = 0; l < 4; ++l) {
      const Group& g = p.groups[4 * ib + l];
      b.qs[4 * ib + l] = static_cast<uint16_t>(g.index[0] | (g.signs & 127) << 9);
    }
  }
}

void pack(const Packed& p, BlockIQ2_S& b) {
  b.d = p.d;
  std::memset(b.qh, 0, sizeof b.qh);
  for (int ib = 0; ib < 8; ++ib) {
    b.scales[ib] = static_cast<uint8_t>(p.codes[2 * ib] | p.codes[2 * ib + 1] << 4);
    for (int l = 0; l < 4; ++l) {
      const int gi = 4 * ib + l;
      const Group& g = p.groups[gi];
      b.qs[gi] = static_cast<uint8_t>(g.index[0]);
      b.qs[kQK_K / 8 + gi] = g.signs;
      b.qh[ib] |= static_cast<uint8_t>((g.index[0] >> 8) << (2 * l));
    }
  }
}

void pack(const Packed& p, BlockIQ3_XXS& b) {
  b.d = p.d;
  for (int ib = 0; ib < 8; ++ib) {
    uint32_t aux = static_cast<uint32_t>(p.codes[ib]) << 28;
    for (int l = 0; l < 4; ++l) {
      const Group& g = p.groups[4 * ib + l];
      b.qs[8 * ib + 2 * l] = static_cast<uint8_t>(g.index[0]);
      b.qs[8 * ib + 2 * l + 1] = static_cast<uint8_t>(g.index[1]);
      aux |= static_cast<uint32_t>(g.signs & 127) << (7 * l);
    }
    std::memcpy(&b.qs[kQK_K / 4 + 4 * ib], &aux, 4);
  }
}

void pack(const Packed& p, BlockIQ3_S& b) {
  b.d = p.d;
  std::memset(b.qh, 0, sizeof b.qh);
  std::memset(b.scales, 0, sizeof b.scales);
  for (int ib = 0; ib < 8; ++ib) {
    b.scales[ib / 2] |= static_cast<uint8_t>(p.codes[ib] << (4 * (ib % 2)));
    for (int l = 0; l < 4; ++l) {
      const int gi = 4 * ib + l;
      const Group& g = p.groups[gi];
      b.qs[2 * gi] = static_cast<uint8_t>(g.index[0]);
      b.qs[2 * gi + 1] = static_cast<uint8_t>(g.index[1]);
      b.qh[ib] |= static_cast<uint8_t>((g.index[0] >> 8) << (2 * l) | (g.index[1] >> 8) << (2 * l + 1));
      b.signs[gi] = g.signs;
    }
  }
}

void pack(const Packed& p, BlockIQ1_S& b) {
  b.d = p.d;
  for (int ib = 0; ib < 8; ++ib) {
    uint32_t h = static_cast<uint32_t>(p.codes[ib]) << 12;
    if (p.groups[4 * ib].shift < 0) h |= 0x8000;
    for (int l = 0; l < 4; ++l) {
      const Group& g = p.groups[4 * ib + l];
      b.qs[4 * ib + l] = static_cast<uint8_t>(g.index[0]);
      h |= static_cast<uint32_t>(g.index[0] >> 8) << (3 * l);
    }
    b.qh[ib] = static_cast<uint16_t>(h);
  }
}

void pack(const Packed& p, BlockIQ1_M& b) {
  uint16_t sc[4] = {};
  for (int sb = 0; sb < 16; ++sb)  // sub-block sb = 2 ib + l/2: bits 3 (sb % 4) of word sb / 4
    sc[sb / 4] |= static_cast<uint16_t>(p.codes[sb] << (3 * (sb % 4)));
  for (int k = 0; k < 4; ++k) sc[k] |= static_cast<uint16_t>(((p.d >> (4 * k)) & 0xF) << 12);
  std::memcpy(b.scales, sc, sizeof sc);
  for (int ib = 0; ib < 8; ++ib)
    for (int l = 0; l < 4; ++l) {
      const Group& g = p.groups[4 * ib + l];
      b.qs[4 * ib + l] = static_cast<uint8_t>(g.index[0]);
      const int nibble = (g.index[0] >> 8) | (g.shift < 0 ? 8 : 0);
      if (l % 2 == 0) {
        b.qh[2 * ib + l / 2] = static_cast<uint8_t>(nibble);
      } else {
        b.qh[2 * ib + l / 2] |= static_cast<uint8_t>(nibble << 4);
      }
    }
}

template <typename Block>
void quantize_rows(GgmlType t, const float* x, void* dst, int64_t n) {
  const Format f = format_of(t);
  auto* b = static_cast<Block*>(dst);
  Packed p;
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float d;
    quantize_super_block(f, x, p.groups, p.codes, &d);
    p.d = fp32_to_fp16(d);
    pack(p, b[i]);
  }
}

void quantize_iq2_xxs(const float* x, void* dst, int64_t n) {
  quantize_rows<BlockIQ2_XXS>(GgmlType::IQ2_XXS, x, dst, n);
}
void quantize_iq2_xs(const float* x, void* dst, int64_t n) { quantize_rows<BlockIQ2_XS>(GgmlType::IQ2_XS, x, dst, n); }
void quantize_iq2_s(const float* x, void* dst, int64_t n) { quantize_rows<BlockIQ2_S>(GgmlType::IQ2_S, x, dst, n); }
void quantize_iq3_xxs(const float* x, void* dst, int64_t n) {
  quantize_rows<BlockIQ3_XXS>(GgmlType::IQ3_XXS, x, dst, n);
}
void quantize_iq3_s(const float* x, void* dst, int64_t n) { quantize_rows<BlockIQ3_S>(GgmlType::IQ3_S, x, dst, n); }
void quantize_iq1_s(const float* x, void* dst, int64_t n) { quantize_rows<BlockIQ1_S>(GgmlType::IQ1_S, x, dst, n); }
void quantize_iq1_m(const float* x, void* dst, int64_t n) { quantize_rows<BlockIQ1_M>(GgmlType::IQ1_M, x, dst, n); }

}  // namespace

QuantizeFn quantize_iq_ref_fn(GgmlType t) {
  switch (t) {
    case GgmlType::IQ2_XXS:
      return quantize_iq2_xxs;
    case GgmlType::IQ2_XS:
      return quantize_iq2_xs;
    case GgmlType::IQ2_S:
      return quantize_iq2_s;
    case GgmlType::IQ3_XXS:
      return quantize_iq3_xxs;
    case GgmlType::IQ3_S:
      return quantize_iq3_s;
    case GgmlType::IQ1_S:
      return quantize_iq1_s;
    case GgmlType::IQ1_M:
      return quantize_iq1_m;
    default:
      return nullptr;
  }
}

}  // namespace mla::quant
