#pragma once
// 16-lane F32 vectors for the attention and indexer kernels: one AVX-512 register where the
// target has it, two AVX2 registers where it has AVX2 + FMA, plain lanes otherwise (GCC vector
// extensions lower the same source to each). Every multiply-add goes through fma16(), fused
// where the target can and a separate multiply and add where it cannot, so the compiler never
// decides the rounding (see vec.h): a lane's result depends only on the lane's inputs and the
// order of the calls, never on which tile or thread ran them.
#include <cstdint>
#include <cstring>
#if defined(__AVX512F__) || defined(__FMA__)
#include <immintrin.h>
#endif

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

// exp(x) lane by lane for x <= 0 (softmax arguments): Cody-Waite reduction by ln 2, a degree-6
// polynomial on [-ln2/2, ln2/2] (relative error about 2e-7), the power of two put into the
// exponent bits. Lanes below -87 (where exp underflows) give 0.
inline f32x16 exp16_nonpos(f32x16 x) {
  const f32x16 lo = splat16(-87.0f);
  const i32x16 under = x < lo;
  x = max16(x, lo);
  // n = round(x / ln 2) by the 1.5 * 2^23 trick (|x / ln 2| < 2^22).
  const f32x16 magic = splat16(12582912.0f);
  const f32x16 t = fma16(x, splat16(1.44269504088896341f), magic);
  const f32x16 n = t - magic;
  f32x16 r = fma16(n, splat16(-0.693359375f), x);
  r = fma16(n, splat16(2.12194440e-4f), r);
  f32x16 p = splat16(1.9875691500e-4f);
  p = fma16(p, r, splat16(1.3981999507e-3f));
  p = fma16(p, r, splat16(8.3334519073e-3f));
  p = fma16(p, r, splat16(4.1665795894e-2f));
  p = fma16(p, r, splat16(1.6666665459e-1f));
  p = fma16(p, r, splat16(5.0000001201e-1f));
  p = fma16(p, r * r, r + 1.0f);
  i32x16 ti, mi;
  std::memcpy(&ti, &t, sizeof t);
  std::memcpy(&mi, &magic, sizeof magic);
  const i32x16 bits = (ti - mi + 127) << 23;
  f32x16 scale;
  std::memcpy(&scale, &bits, sizeof scale);
  const f32x16 y = p * scale;
  return under ? f32x16{} : y;
}

// n F16 values to F32, bit for bit what `fallback` (the quant library's F16 dequantization) gives:
// 16 at a time by the hardware conversion where none of the 16 is an Inf or a NaN (the hardware
// quiets a signalling NaN, the library keeps its payload bits), by fallback for such a group and
// for the tail. Finite F16 values convert exactly either way.
inline void f16_to_f32(const uint16_t* x, float* y, int64_t n, void (*fallback)(const void*, float*, int64_t)) {
  int64_t i = 0;
#if defined(__AVX512F__) && defined(__AVX2__)
  const __m256i exp_mask = _mm256_set1_epi16(0x7C00);
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i special = _mm256_cmpeq_epi16(_mm256_and_si256(h, exp_mask), exp_mask);
    if (!_mm256_testz_si256(special, special)) {
      fallback(x + i, y + i, 16);
      continue;
    }
    _mm512_storeu_ps(y + i, _mm512_cvtph_ps(h));
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
}

}  // namespace mla::simd
