#pragma once
// Small F32 vector helpers shared by the fast kernels. Each has a fixed reduction order
// (interleaved partial sums, combined pairwise), so a result depends only on its inputs.
// The `_ref` twins of the ops that use them accumulate in double, in index order.
#include <cstdint>

namespace mla {

inline float dot_f32(const float* a, const float* b, int64_t n) {
  // 32 partial sums: four independent 8-lane FMA chains once vectorized.
  float acc[32] = {};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 32; ++k) acc[k] += a[i + k] * b[i + k];
  for (int k = 0; i < n; ++i, ++k) acc[k] += a[i] * b[i];
  for (int k = 0; k < 16; ++k) acc[k] += acc[k + 16];
  for (int k = 0; k < 8; ++k) acc[k] += acc[k + 8];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

inline float sum_squares_f32(const float* a, int64_t n) { return dot_f32(a, a, n); }

// y += alpha * x
inline void axpy_f32(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

inline double dot_f64(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

}  // namespace mla
