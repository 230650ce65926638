#include "kernels/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace mla {
namespace {

// Pair index whose wavelength makes n_rot turns over n_ctx_orig positions.
double corr_dim(int n_dims, int64_t n_ctx_orig, double n_rot, double base) {
  return n_dims * std::log(static_cast<double>(n_ctx_orig) / (n_rot * 2 * std::numbers::pi)) / (2 * std::log(base));
}

// Angle of pair i at position pos, blended as YaRN prescribes.
double pair_theta(const RopeParams& p, const double dims[2], int64_t pos, int i) {
  double inv_freq = 1.0 / std::pow(p.freq_base, (2.0 * i) / p.n_dims);
  double extrap = static_cast<double>(pos) * inv_freq;
  double interp = p.freq_scale * extrap;
  if (p.ext_factor == 0) return interp;
  double y = (i - dims[0]) / std::max(0.001, dims[1] - dims[0]);
  double ramp = (1.0 - std::clamp(y, 0.0, 1.0)) * p.ext_factor;  // 1: extrapolate, 0: interpolate
  return interp * (1 - ramp) + extrap * ramp;
}

}  // namespace

void rope_yarn_corr_dims(const RopeParams& p, double dims[2]) {
  double start = std::floor(corr_dim(p.n_dims, p.n_ctx_orig, p.beta_fast, p.freq_base));
  double end = std::ceil(corr_dim(p.n_dims, p.n_ctx_orig, p.beta_slow, p.freq_base));
  dims[0] = std::max(0.0, start);
  dims[1] = std::min(static_cast<double>(p.n_dims - 1), end);
}

void rope_cos_sin(const RopeParams& p, int64_t pos, float* cos_out, float* sin_out) {
  double dims[2] = {0, 0};
  if (p.ext_factor != 0) rope_yarn_corr_dims(p, dims);
  for (int i = 0; i < p.n_dims / 2; ++i) {
    double theta = pair_theta(p, dims, pos, i);
    cos_out[i] = static_cast<float>(std::cos(theta) * p.attn_factor);
    sin_out[i] = static_cast<float>(std::sin(theta) * p.attn_factor);
  }
}

void rope_apply(float* x, int64_t n_rows, int64_t stride, int n_dims, const float* cos_v, const float* sin_v) {
  for (int64_t r = 0; r < n_rows; ++r) {
    float* v = x + r * stride;
    for (int i = 0; i < n_dims / 2; ++i) {
      float x0 = v[2 * i], x1 = v[2 * i + 1];
      v[2 * i] = x0 * cos_v[i] - x1 * sin_v[i];
      v[2 * i + 1] = x0 * sin_v[i] + x1 * cos_v[i];
    }
  }
}

void rope_apply_neox(float* x, int64_t n_rows, int64_t stride, int n_dims, const float* cos_v, const float* sin_v) {
  const int half = n_dims / 2;
  for (int64_t r = 0; r < n_rows; ++r) {
    float* v = x + r * stride;
    for (int i = 0; i < half; ++i) {
      float x0 = v[i], x1 = v[i + half];
      v[i] = x0 * cos_v[i] - x1 * sin_v[i];
      v[i + half] = x0 * sin_v[i] + x1 * cos_v[i];
    }
  }
}

void rope_ref(const RopeParams& p, int64_t pos, float* x) {
  double dims[2] = {0, 0};
  if (p.ext_factor != 0) rope_yarn_corr_dims(p, dims);
  for (int i = 0; i < p.n_dims / 2; ++i) {
    double theta = pair_theta(p, dims, pos, i);
    double c = std::cos(theta) * p.attn_factor, s = std::sin(theta) * p.attn_factor;
    double x0 = x[2 * i], x1 = x[2 * i + 1];
    x[2 * i] = static_cast<float>(x0 * c - x1 * s);
    x[2 * i + 1] = static_cast<float>(x0 * s + x1 * c);
  }
}

}  // namespace mla
