#pragma once
// The attention kernels' native vectors, one register each: F32 (vf, kF32Lanes lanes: 16 on
// AVX-512, 8 elsewhere) for the F32 MHA kernel, and F64 (f64v, kF64Lanes lanes: 8 on AVX-512, 4 on
// AVX, 2 elsewhere) for the exact kernels, with the same operation names for both. GCC vector
// extensions lower the same source to each target. Every multiply-add goes through fmav(), fused
// where the target has FMA and a separate multiply and add where it has none, so the compiler never
// decides the rounding (see vec.h). simd16.h builds its 16-lane vectors (the F32 MQA and indexer
// kernels) on these, and shares exp_nonpos_f32.
#include <cstdint>
#include <cstring>
#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif

namespace mla::simd {

inline int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// ---- F32 ----

#if defined(__AVX512F__)
constexpr int kF32Lanes = 16;
#else
constexpr int kF32Lanes = 8;
#endif
using vf = float __attribute__((vector_size(kF32Lanes * sizeof(float))));
using vi = int32_t __attribute__((vector_size(kF32Lanes * sizeof(float))));

inline vf load(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, vf v) { std::memcpy(p, &v, sizeof v); }
// x in every lane (a broadcast: `vf{} + x` would add a zero, one more instruction, and turn -0 into +0).
inline vf splat(float x) {
#if defined(__AVX512F__)
  return (vf)_mm512_set1_ps(x);
#elif defined(__AVX__)
  return (vf)_mm256_set1_ps(x);
#else
  return x - vf{};   // exact for every x, -0 included
#endif
}
// a * b + c
inline vf fmav(vf a, vf b, vf c) {
#if defined(__AVX512F__)
  return (vf)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);  // same-size vector casts
#elif defined(__FMA__)
  return (vf)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);  // same-size vector casts
#else
  return a * b + c;  // no FMA on this target: cannot be contracted
#endif
}

// exp(x) lane by lane for x <= 0 (softmax arguments), for any F32 vector type F (I: the int32
// vector of its width; fma: its a * b + c): Cody-Waite reduction by ln 2, a degree-6 polynomial on
// [-ln2/2, ln2/2] (relative error about 2e-7), the power of two put into the exponent bits. Lanes
// below -87 (where exp underflows) give 0.
template <class F, class I, class Fma>
inline F exp_nonpos_f32(F x, Fma fma) {
  const F lo = F{} - 87.0f;
  const I under = x < lo;
  x = x > lo ? x : lo;
  // n = round(x / ln 2) by the 1.5 * 2^23 trick (|x / ln 2| < 2^22).
  const F magic = F{} + 12582912.0f;
  const F t = fma(x, F{} + 1.44269504088896341f, magic);
  const F n = t - magic;
  F r = fma(n, F{} - 0.693359375f, x);
  r = fma(n, F{} + 2.12194440e-4f, r);
  F p = F{} + 1.9875691500e-4f;
  p = fma(p, r, F{} + 1.3981999507e-3f);
  p = fma(p, r, F{} + 8.3334519073e-3f);
  p = fma(p, r, F{} + 4.1665795894e-2f);
  p = fma(p, r, F{} + 1.6666665459e-1f);
  p = fma(p, r, F{} + 5.0000001201e-1f);
  p = fma(p, r * r, r + 1.0f);
  I ti, mi;
  std::memcpy(&ti, &t, sizeof t);
  std::memcpy(&mi, &magic, sizeof magic);
  const I bits = (ti - mi + 127) << 23;
  F scale;
  std::memcpy(&scale, &bits, sizeof scale);
  const F y = p * scale;
  return under ? F{} : y;
}
inline vf exp_nonpos(vf x) {
  return exp_nonpos_f32<vf, vi>(x, [](vf a, vf b, vf c) { return fmav(a, b, c); });
}

// ---- F64 ----

#if defined(__AVX512F__)
constexpr int kF64Lanes = 8;
#elif defined(__AVX__)
constexpr int kF64Lanes = 4;
#else
constexpr int kF64Lanes = 2;
#endif
using f64v = double __attribute__((vector_size(kF64Lanes * sizeof(double))));
using i64v = long long __attribute__((vector_size(kF64Lanes * sizeof(double))));

inline f64v load(const double* p) {
  f64v v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(double* p, f64v v) { std::memcpy(p, &v, sizeof v); }
// (Not f64v{} + x: adding 0.0 is an operation the compiler must keep, since -0.0 + 0.0 is +0.0.)
inline f64v splat(double x) {
#if defined(__AVX512F__)
  return (f64v)_mm512_set1_pd(x);
#elif defined(__AVX__)
  return (f64v)_mm256_set1_pd(x);
#else
  return f64v{x, x};
#endif
}
inline f64v fmav(f64v a, f64v b, f64v c) {
#if defined(__AVX512F__)
  return (f64v)_mm512_fmadd_pd((__m512d)a, (__m512d)b, (__m512d)c);
#elif defined(__FMA__)
  return (f64v)_mm256_fmadd_pd((__m256d)a, (__m256d)b, (__m256d)c);
#else
  return a * b + c;
#endif
}
// kF64Lanes F32 values widened to double (exactly).
inline f64v widen_f32(const float* p) {
#if defined(__AVX512F__)
  return (f64v)_mm512_cvtps_pd(_mm256_loadu_ps(p));
#elif defined(__AVX__)
  return (f64v)_mm256_cvtps_pd(_mm_loadu_ps(p));
#else
  f64v v;
  for (int k = 0; k < kF64Lanes; ++k) v[k] = p[k];
  return v;
#endif
}
// kF64Lanes int8 values widened to double (exactly).
inline f64v widen_i8(const int8_t* p) {
#if defined(__AVX512F__)
  return (f64v)_mm512_cvtepi32_pd(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
#elif defined(__AVX__)
  int32_t w;
  std::memcpy(&w, p, sizeof w);
  return (f64v)_mm256_cvtepi32_pd(_mm_cvtepi8_epi32(_mm_cvtsi32_si128(w)));
#else
  f64v v;
  for (int k = 0; k < kF64Lanes; ++k) v[k] = p[k];
  return v;
#endif
}
// Σ lanes, in lane order.
inline double hsum(f64v v) {
  double s = 0;
  for (int k = 0; k < kF64Lanes; ++k) s += v[k];
  return s;
}
inline f64v vmax(f64v a, f64v b) { return a > b ? a : b; }

// exp(x) for x <= 0 (and -inf) lane by lane to ~2 ulp of double: x = n ln2 + r with ln 2 in two
// parts (the first has trailing zero bits, so n · ln2_hi is exact), exp(r) by its Taylor series to
// degree 13 on |r| <= ln2 / 2 (truncation below 1e-17), 2^n put into the exponent. Below -708
// the result is 0 (exp underflows there anyway).
inline f64v exp_nonpos(f64v x) {
  const f64v lo = splat(-708.0);
  const auto under = x < lo;
  x = x > lo ? x : lo;
  const f64v magic = splat(6755399441055744.0);  // 1.5 · 2^52: adding it rounds to an integer
  const f64v t = fmav(x, splat(1.4426950408889634), magic);
  const f64v n = t - magic;
  f64v r = fmav(n, splat(-6.93147180369123816490e-01), x);
  r = fmav(n, splat(-1.90821492927058770002e-10), r);
  static constexpr double kC[] = {1.0 / 6227020800.0,
                                  1.0 / 479001600.0,
                                  1.0 / 39916800.0,
                                  1.0 / 3628800.0,
                                  1.0 / 362880.0,
                                  1.0 / 40320.0,
                                  1.0 / 5040.0,
                                  1.0 / 720.0,
                                  1.0 / 120.0,
                                  1.0 / 24.0,
                                  1.0 / 6.0,
                                  0.5,
                                  1.0,
                                  1.0};
  f64v p = splat(kC[0]);
  for (size_t k = 1; k < sizeof kC / sizeof kC[0]; ++k) p = fmav(p, r, splat(kC[k]));
  i64v ti, mi;
  std::memcpy(&ti, &t, sizeof t);
  std::memcpy(&mi, &magic, sizeof magic);
  const i64v bits = (ti - mi + 1023) << 52;
  f64v scale;
  std::memcpy(&scale, &bits, sizeof scale);
  const f64v y = p * scale;
  return under ? f64v{} : y;
}
// One value through the vector exp_nonpos (the same bits as a lane of it).
inline double exp_nonpos(double x) { return exp_nonpos(splat(x))[0]; }

}  // namespace mla::simd
