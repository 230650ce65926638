#pragma once
// Small F32 vector helpers shared by the fast kernels. Each has a fixed reduction order
// (interleaved partial sums, combined pairwise), so a result depends only on its inputs.
// The `_ref` twins of the ops that use them accumulate in double, in index order.
//
// Multiply-adds are written as explicit fused operations where the target has FMA (and as a
// separate multiply and add where it has none, which a compiler cannot fuse): left to the
// compiler's contraction, two inlined copies of the same loop can round differently, and then
// an output would depend on which tile or thread computed it.
#include <cmath>
#include <cstdint>
#ifdef __FMA__
#include <immintrin.h>
#endif

namespace mla {

inline float fma_f32(float a, float b, float c) {
#ifdef __FMA__
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

inline float dot_f32(const float* a, const float* b, int64_t n) {
  // 32 partial sums: four independent 8-lane FMA chains once vectorized.
  float acc[32] = {};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 32; ++k) acc[k] = fma_f32(a[i + k], b[i + k], acc[k]);
  for (int k = 0; i < n; ++i, ++k) acc[k] = fma_f32(a[i], b[i], acc[k]);
  for (int k = 0; k < 16; ++k) acc[k] += acc[k + 16];
  for (int k = 0; k < 8; ++k) acc[k] += acc[k + 8];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

inline float sum_squares_f32(const float* a, int64_t n) { return dot_f32(a, a, n); }

// y += alpha * x
inline void axpy_f32(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fma_f32(alpha, x[i], y[i]);
}

// A tile of dot products: c[r * ldc + s] = a[r] · b[s] for r < MR, s < NR, vectors of length k.
// Every output is accumulated the same way whatever the tile shape (8 lanes over k in steps of 8,
// the tail into lanes 0.., then a fixed pairwise sum), so an output does not depend on which tile
// computed it. MR x NR independent accumulators keep the FMA units busy; each loaded 8-float
// piece of a is used NR times and of b MR times.
using f32x8 = float __attribute__((vector_size(32)));

inline f32x8 load_f32x8(const float* p) {
  f32x8 v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

// a * b + c, lane by lane, fused where the target can.
inline f32x8 fma_f32x8(f32x8 a, f32x8 b, f32x8 c) {
#ifdef __FMA__
  return (f32x8)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);  // same-size vector casts
#else
  return a * b + c;
#endif
}

template <int MR, int NR>
inline void dot_tile_f32(const float* const* a, const float* const* b, int64_t k, float* c, int64_t ldc) {
  f32x8 acc[MR][NR] = {};
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    f32x8 bv[NR];
    for (int s = 0; s < NR; ++s) bv[s] = load_f32x8(b[s] + i);
    for (int r = 0; r < MR; ++r) {
      const f32x8 av = load_f32x8(a[r] + i);
      for (int s = 0; s < NR; ++s) acc[r][s] = fma_f32x8(av, bv[s], acc[r][s]);
    }
  }
  for (int l = 0; i < k; ++i, ++l)
    for (int r = 0; r < MR; ++r)
      for (int s = 0; s < NR; ++s) acc[r][s][l] = fma_f32(a[r][i], b[s][i], acc[r][s][l]);
  for (int r = 0; r < MR; ++r)
    for (int s = 0; s < NR; ++s) {
      const f32x8& v = acc[r][s];
      c[r * ldc + s] = ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
    }
}

// c[r * ldc + s] = a_row(r) · b_row(s) for r < m, s < n, in 2 x 4 tiles (edges in smaller ones;
// every output is computed as dot_tile_f32 computes it). a_row/b_row map an index to a row pointer.
template <class ARow, class BRow>
inline void dot_block_f32(int64_t m, int64_t n, int64_t k, ARow a_row, BRow b_row, float* c, int64_t ldc) {
  int64_t r = 0;
  for (; r + 2 <= m; r += 2) {
    const float* a[2] = {a_row(r), a_row(r + 1)};
    int64_t s = 0;
    for (; s + 4 <= n; s += 4) {
      const float* b[4] = {b_row(s), b_row(s + 1), b_row(s + 2), b_row(s + 3)};
      dot_tile_f32<2, 4>(a, b, k, c + r * ldc + s, ldc);
    }
    for (; s < n; ++s) {
      const float* b[1] = {b_row(s)};
      dot_tile_f32<2, 1>(a, b, k, c + r * ldc + s, ldc);
    }
  }
  for (; r < m; ++r) {
    const float* a[1] = {a_row(r)};
    int64_t s = 0;
    for (; s + 4 <= n; s += 4) {
      const float* b[4] = {b_row(s), b_row(s + 1), b_row(s + 2), b_row(s + 3)};
      dot_tile_f32<1, 4>(a, b, k, c + r * ldc + s, ldc);
    }
    for (; s < n; ++s) {
      const float* b[1] = {b_row(s)};
      dot_tile_f32<1, 1>(a, b, k, c + r * ldc + s, ldc);
    }
  }
}

inline double dot_f64(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

}  // namespace mla
