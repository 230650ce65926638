#pragma once
// 16-lane F32 vectors for the attention and indexer kernels, built on simd.h's native vectors: one
// AVX-512 register where the target has it, two AVX2 registers where it has AVX2 + FMA, plain lanes
// otherwise (GCC vector extensions lower the same source to each). Every multiply-add goes through
// fma16(), fused where the target can and a separate multiply and add where it cannot, so the
// compiler never decides the rounding (see vec.h): a lane's result depends only on the lane's
// inputs and the order of the calls, never on which tile or thread ran them.
#include <cstdint>
#include <cstring>
#if defined(__AVX512F__) || defined(__FMA__) || defined(__F16C__)
#include <immintrin.h>
#endif

#include "kernels/simd.h"

namespace mla::simd {

using f32x16 = float __attribute__((vector_size(64)));
using i32x16 = int32_t __attribute__((vector_size(64)));

inline f32x16 load16(const float* p) {
  f32x16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store16(float* p, f32x16 v) { std::memcpy(p, &v, sizeof v); }
inline f32x16 splat16(float x) { return f32x16{} + x; }

// a * b + c
inline f32x16 fma16(f32x16 a, f32x16 b, f32x16 c) {
#if defined(__AVX512F__)
  return (f32x16)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);  // same-size vector casts
#elif defined(__FMA__)
  using f32x8 = float __attribute__((vector_size(32)));
  f32x8 a2[2], b2[2], c2[2];
  std::memcpy(a2, &a, sizeof a);
  std::memcpy(b2, &b, sizeof b);
  std::memcpy(c2, &c, sizeof c);
  for (int i = 0; i < 2; ++i) c2[i] = (f32x8)_mm256_fmadd_ps((__m256)a2[i], (__m256)b2[i], (__m256)c2[i]);
  f32x16 r;
  std::memcpy(&r, c2, sizeof r);
  return r;
#else
  return a * b + c;  // no FMA on this target: cannot be contracted
#endif
}

inline f32x16 max16(f32x16 a, f32x16 b) { return a > b ? a : b; }

// The target's own register width, for loops that run lane by lane over 16-lane groups: 8 lanes
// (f32xn) on AVX2 + FMA without AVX-512, where GCC keeps a 16-lane vector in memory (there is no
// register of that size: every operation on one becomes loads, stores and lane shuffles), 16
// lanes elsewhere. The same operations lane by lane, so the same bits, whichever width runs them.
// (On AVX2 + FMA these are simd.h's native vf.)
#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
#define MLA_SIMD16_YMM 1
using f32xn = vf;
using i32xn = vi;
inline f32xn fma_n(f32xn a, f32xn b, f32xn c) { return fmav(a, b, c); }
#else
using f32xn = f32x16;
using i32xn = i32x16;
inline f32xn fma_n(f32xn a, f32xn b, f32xn c) { return fma16(a, b, c); }
#endif
constexpr int kLanesN = sizeof(f32xn) / sizeof(float);

inline f32xn load_n(const float* p) {
  f32xn v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store_n(float* p, f32xn v) { std::memcpy(p, &v, sizeof v); }
inline f32xn splat_n(float x) { return f32xn{} + x; }
inline f32xn max_n(f32xn a, f32xn b) { return a > b ? a : b; }

// exp(x) for x <= 0, lane by lane (exp_nonpos_f32 of simd.h).
inline f32x16 exp16_nonpos(f32x16 x) {
  return exp_nonpos_f32<f32x16, i32x16>(x, [](f32x16 a, f32x16 b, f32x16 c) { return fma16(a, b, c); });
}
inline f32xn exp_n_nonpos(f32xn x) {
  return exp_nonpos_f32<f32xn, i32xn>(x, [](f32xn a, f32xn b, f32xn c) { return fma_n(a, b, c); });
}

// n F16 values to F32, bit for bit what `fallback` (the quant library's F16 dequantization) gives:
// 16 at a time by the hardware conversion (one AVX-512 or two F16C instructions) where none of
// the 16 is an Inf or a NaN (the hardware quiets a signalling NaN, the library keeps its payload
// bits), by fallback for such a group and for the tail. Finite F16 values convert exactly either
// way.
inline void f16_to_f32(const uint16_t* x, float* y, int64_t n, void (*fallback)(const void*, float*, int64_t)) {
  int64_t i = 0;
#if defined(__AVX2__) && (defined(__AVX512F__) || defined(__F16C__))
  const __m256i exp_mask = _mm256_set1_epi16(0x7C00);
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i special = _mm256_cmpeq_epi16(_mm256_and_si256(h, exp_mask), exp_mask);
    if (!_mm256_testz_si256(special, special)) {
      fallback(x + i, y + i, 16);
      continue;
    }
#if defined(__AVX512F__)
    _mm512_storeu_ps(y + i, _mm512_cvtph_ps(h));
#else
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm256_castsi256_si128(h)));
    _mm256_storeu_ps(y + i + 8, _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)));
#endif
  }
#endif
  if (i < n) fallback(x + i, y + i, n - i);
}

// Σ lanes in a fixed pairwise order.
inline float hsum16(f32x16 v) {
  float s[8];
  for (int i = 0; i < 8; ++i) s[i] = v[i] + v[i + 8];
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

#if defined(MLA_SIMD16_YMM)
// AVX2 + FMA without AVX-512: the tiles below in 8-lane registers (f32x16 accumulators would live
// in memory, see f32xn). The 16 ymm registers hold 12 accumulators (6 rows or heads x the two
// halves of one 16-lane group), the two loaded halves and one broadcast. Each lane computes the
// same chain of fused multiply-adds, in the same order, as the generic tiles.
// The accumulator loops are unrolled before GCC decides where the arrays live (left to its later
// unrolling, it keeps them in registers but also stores every one of them on each step).
namespace ymm {

constexpr int kTileRows = 6;

// out[r * ldo + l] = Σ_{c < k} a[r * lda + c] * bt[c * ldb + l] for r < R, l < 16.
template <int R>
inline void dot_rows_tile(const float* a, int64_t lda, const float* bt, int64_t ldb, int64_t k, float* out,
                          int64_t ldo) {
  __m256 acc[R][2];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t c = 0; c < k; ++c) {
    const __m256 b0 = _mm256_loadu_ps(bt + c * ldb), b1 = _mm256_loadu_ps(bt + c * ldb + 8);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_broadcast_ss(a + r * lda + c);
      acc[r][0] = _mm256_fmadd_ps(x, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(x, b1, acc[r][1]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(out + r * ldo, acc[r][0]);
    _mm256_storeu_ps(out + r * ldo + 8, acc[r][1]);
  }
}

template <int R>
inline void dot_rows_block(const float* a, int64_t lda, const float* bt, int64_t ldb, int64_t n_vec, int64_t k,
                           float* out, int64_t ldo) {
  for (int64_t v = 0; v < n_vec; ++v) dot_rows_tile<R>(a, lda, bt + v * 16, ldb, k, out + v * 16, ldo);
}

// out[h * ldo + l] = Σ_{j < m} w[j * ldw + h] * x[j * ldx + l] for h < HB, l < 16.
template <int HB>
inline void weighted_rows_tile(const float* w, int64_t ldw, const float* x, int64_t ldx, int64_t m, float* out,
                               int64_t ldo) {
  __m256 acc[HB][2];
#pragma GCC unroll 8
  for (int h = 0; h < HB; ++h) acc[h][0] = acc[h][1] = _mm256_setzero_ps();
  for (int64_t j = 0; j < m; ++j) {
    const __m256 x0 = _mm256_loadu_ps(x + j * ldx), x1 = _mm256_loadu_ps(x + j * ldx + 8);
#pragma GCC unroll 8
    for (int h = 0; h < HB; ++h) {
      const __m256 s = _mm256_broadcast_ss(w + j * ldw + h);
      acc[h][0] = _mm256_fmadd_ps(s, x0, acc[h][0]);
      acc[h][1] = _mm256_fmadd_ps(s, x1, acc[h][1]);
    }
  }
#pragma GCC unroll 8
  for (int h = 0; h < HB; ++h) {
    _mm256_storeu_ps(out + h * ldo, acc[h][0]);
    _mm256_storeu_ps(out + h * ldo + 8, acc[h][1]);
  }
}

inline void weighted_rows_h(int64_t nh, const float* w, int64_t ldw, const float* x, int64_t ldx, int64_t m, float* out,
                            int64_t ldo) {
  switch (nh) {
    case 6:
      weighted_rows_tile<6>(w, ldw, x, ldx, m, out, ldo);
      break;
    case 5:
      weighted_rows_tile<5>(w, ldw, x, ldx, m, out, ldo);
      break;
    case 4:
      weighted_rows_tile<4>(w, ldw, x, ldx, m, out, ldo);
      break;
    case 3:
      weighted_rows_tile<3>(w, ldw, x, ldx, m, out, ldo);
      break;
    case 2:
      weighted_rows_tile<2>(w, ldw, x, ldx, m, out, ldo);
      break;
    default:
      weighted_rows_tile<1>(w, ldw, x, ldx, m, out, ldo);
      break;
  }
}

}  // namespace ymm
#endif

// Tile of dot products vectorized over the columns of a transposed matrix:
//   out[j * ldo + v * 16 + l] = Σ_{c < k} a[j * lda + c] * bt[c * ldb + v * 16 + l]
// for rows j < m and 16-lane column groups v < n_vec. Each output is one chain of fma16 over c in
// order, so it does not depend on m, n_vec or the blocking. ldb and ldo are multiples of 16.
template <int R, int V>
inline void dot_rows_tile(const float* a, int64_t lda, const float* bt, int64_t ldb, int64_t k, float* out,
                          int64_t ldo) {
  f32x16 acc[R][V] = {};
  for (int64_t c = 0; c < k; ++c) {
    f32x16 b[V];
    for (int v = 0; v < V; ++v) b[v] = load16(bt + c * ldb + v * 16);
    for (int r = 0; r < R; ++r) {
      const f32x16 x = splat16(a[r * lda + c]);
      for (int v = 0; v < V; ++v) acc[r][v] = fma16(x, b[v], acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) store16(out + r * ldo + v * 16, acc[r][v]);
}

template <int V>
inline void dot_rows_v(const float* a, int64_t lda, int64_t m, const float* bt, int64_t ldb, int64_t k, float* out,
                       int64_t ldo) {
  constexpr int R = 24 / V;
  int64_t j = 0;
  for (; j + R <= m; j += R) dot_rows_tile<R, V>(a + j * lda, lda, bt, ldb, k, out + j * ldo, ldo);
  for (; j < m; ++j) dot_rows_tile<1, V>(a + j * lda, lda, bt, ldb, k, out + j * ldo, ldo);
}

// out[j][0 .. 16 n_vec) for rows j < m: the tile above over any number of column groups.
inline void dot_rows(const float* a, int64_t lda, int64_t m, const float* bt, int64_t ldb, int64_t n_vec, int64_t k,
                     float* out, int64_t ldo) {
#if defined(MLA_SIMD16_YMM)
  // Row blocks of 6 (the remainder as one block of its own size), each over every column group
  // while its rows stay in L1.
  constexpr int R = ymm::kTileRows;
  int64_t j = 0;
  for (; j + R <= m; j += R) ymm::dot_rows_block<R>(a + j * lda, lda, bt, ldb, n_vec, k, out + j * ldo, ldo);
  a += j * lda, out += j * ldo;
  switch (m - j) {
    case 5:
      ymm::dot_rows_block<5>(a, lda, bt, ldb, n_vec, k, out, ldo);
      break;
    case 4:
      ymm::dot_rows_block<4>(a, lda, bt, ldb, n_vec, k, out, ldo);
      break;
    case 3:
      ymm::dot_rows_block<3>(a, lda, bt, ldb, n_vec, k, out, ldo);
      break;
    case 2:
      ymm::dot_rows_block<2>(a, lda, bt, ldb, n_vec, k, out, ldo);
      break;
    case 1:
      ymm::dot_rows_block<1>(a, lda, bt, ldb, n_vec, k, out, ldo);
      break;
    default:
      break;
  }
#else
  int64_t v = 0;
  for (; v + 4 <= n_vec; v += 4) dot_rows_v<4>(a, lda, m, bt + v * 16, ldb, k, out + v * 16, ldo);
  switch (n_vec - v) {
    case 3:
      dot_rows_v<3>(a, lda, m, bt + v * 16, ldb, k, out + v * 16, ldo);
      break;
    case 2:
      dot_rows_v<2>(a, lda, m, bt + v * 16, ldb, k, out + v * 16, ldo);
      break;
    case 1:
      dot_rows_v<1>(a, lda, m, bt + v * 16, ldb, k, out + v * 16, ldo);
      break;
    default:
      break;
  }
#endif
}

// Weighted sums of rows, vectorized over the row elements:
//   out[h * ldo + c] = Σ_{j < m} w[j * ldw + h] * x[j * ldx + c]
// for h < n_h and c < 16 n_cvec, fresh sums. Each output is one chain of fma16 over j in order.
template <int HB, int CB>
inline void weighted_rows_tile(const float* w, int64_t ldw, const float* x, int64_t ldx, int64_t m, float* out,
                               int64_t ldo) {
  f32x16 acc[HB][CB] = {};
  for (int64_t j = 0; j < m; ++j) {
    f32x16 xv[CB];
    for (int c = 0; c < CB; ++c) xv[c] = load16(x + j * ldx + c * 16);
    for (int h = 0; h < HB; ++h) {
      const f32x16 s = splat16(w[j * ldw + h]);
      for (int c = 0; c < CB; ++c) acc[h][c] = fma16(s, xv[c], acc[h][c]);
    }
  }
  for (int h = 0; h < HB; ++h)
    for (int c = 0; c < CB; ++c) store16(out + h * ldo + c * 16, acc[h][c]);
}

template <int CB>
inline void weighted_rows_h(int64_t nh, const float* w, int64_t ldw, const float* x, int64_t ldx, int64_t m, float* out,
                            int64_t ldo) {
  switch (nh) {
    case 6:
      weighted_rows_tile<6, CB>(w, ldw, x, ldx, m, out, ldo);
      break;
    case 5:
      weighted_rows_tile<5, CB>(w, ldw, x, ldx, m, out, ldo);
      break;
    case 4:
      weighted_rows_tile<4, CB>(w, ldw, x, ldx, m, out, ldo);
      break;
    case 3:
      weighted_rows_tile<3, CB>(w, ldw, x, ldx, m, out, ldo);
      break;
    case 2:
      weighted_rows_tile<2, CB>(w, ldw, x, ldx, m, out, ldo);
      break;
    default:
      weighted_rows_tile<1, CB>(w, ldw, x, ldx, m, out, ldo);
      break;
  }
}

// All of out[h][0 .. 16 n_cvec) for h < n_h, in tiles of up to 6 heads x 4 vectors (every output
// is the same chain whatever tile computed it).
inline void weighted_rows(const float* w, int64_t ldw, int64_t n_h, const float* x, int64_t ldx, int64_t n_cvec,
                          int64_t m, float* out, int64_t ldo) {
#if defined(MLA_SIMD16_YMM)
  // One 16-lane column group at a time (its rows stay in L1 over the head blocks).
  constexpr int64_t HB = ymm::kTileRows;
  for (int64_t c = 0; c < n_cvec; ++c)
    for (int64_t h = 0; h < n_h; h += HB)
      ymm::weighted_rows_h(n_h - h < HB ? n_h - h : HB, w + h, ldw, x + c * 16, ldx, m, out + h * ldo + c * 16, ldo);
#else
  constexpr int64_t HB = 6, CB = 4;
  for (int64_t c = 0; c < n_cvec; c += CB) {
    const int64_t nc = n_cvec - c < CB ? n_cvec - c : CB;
    for (int64_t h = 0; h < n_h; h += HB) {
      const int64_t nh = n_h - h < HB ? n_h - h : HB;
      const float* wp = w + h;
      const float* xp = x + c * 16;
      float* op = out + h * ldo + c * 16;
      switch (nc) {
        case 4:
          weighted_rows_h<4>(nh, wp, ldw, xp, ldx, m, op, ldo);
          break;
        case 3:
          weighted_rows_h<3>(nh, wp, ldw, xp, ldx, m, op, ldo);
          break;
        case 2:
          weighted_rows_h<2>(nh, wp, ldw, xp, ldx, m, op, ldo);
          break;
        default:
          weighted_rows_h<1>(nh, wp, ldw, xp, ldx, m, op, ldo);
          break;
      }
    }
  }
#endif
}

}  // namespace mla::simd
