#include "kernels/ops.h"

#include <cmath>

#include "kernels/vec.h"

namespace mla {

void rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps) {
  float mean = sum_squares_f32(x, n) / static_cast<float>(n);
  float inv = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * w[i];
}

void rmsnorm_ref(const float* x, const float* w, float* y, int64_t n, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i] * inv * w[i]);
}

void layernorm(const float* x, const float* w, const float* b, float* y, int64_t n, float eps) {
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const float mean = sum / static_cast<float>(n);
  float var = 0;
  for (int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  const float inv = 1.0f / std::sqrt(var / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * inv * w[i] + b[i];
}

void layernorm_ref(const float* x, const float* w, const float* b, float* y, int64_t n, float eps) {
  double sum = 0, var = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const double mean = sum / static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  const double inv = 1.0 / std::sqrt(var / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>((x[i] - mean) * inv * w[i] + b[i]);
}

void softmax(float* x, int64_t n) {
  float mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    acc[i & 7] += x[i];
  }
  float sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void softmax_ref(float* x, int64_t n) {
  double mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(x[i] - mx);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(std::exp(x[i] - mx) / sum);
}

void swiglu(const float* gate, const float* up, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float g = gate[i];
    y[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void swiglu_ref(const float* gate, const float* up, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double g = gate[i];
    y[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace mla
