// Exact MLA attention: both paths in double from the same F32 inputs, rounded to F32 once.
//
// Why: the two paths are the same function of their inputs, but F32 kernels associate its sums
// differently (q·(W_UK c) against (W_UKᵀ q)·c, Σ p (W_UV c) against W_UV (Σ p c)), so their
// outputs differ by an ulp or two. The next matmul quantizes that output (Q8_0 / Q8_K, 127
// levels per block): a value within an ulp of a rounding boundary lands on different levels,
// which moves the layer's output by ~1e-3 relative and every later layer with it. On V2-Lite
// widths one such flip per layer is the norm, so the paths' logits part by 1e-2.
//
// Here every product of two F32 values is exact in double, and every sum, exp and fold runs in
// double (relative error ~1e-15 against the exact real result). The output is that result
// rounded to F32: the same float on both paths unless the exact value lies within ~1e-15 of a
// rounding midpoint (about one output in 10^8). The paths, prefill chunking and the build
// target (scalar, AVX2, AVX-512) then give the same bits, and so do the activations quantized
// downstream.
//
// Structure. MQA: per query the absorbed q (W_UKᵀ q_nope, and q_pe, times kq_scale) is laid out
// [row element][head]; the query's rows go in parts (at most 16, whole 512-row units, fixed by
// its row count alone, so a part is the same whatever the batch or the threads), each part in
// 64-row tiles converted to double once for all the head groups (up to 16 heads each) a thread
// takes. Per group, both products run with the heads along the vector and a tile value broadcast:
// scores 8 rows x 16 heads in registers, then an online softmax in double, then Σ p c 8 row
// elements x 16 heads (the output kept [row element][head]). Parts are folded in order, then
// un-absorbed by W_UV. MHA: per head, 64-row key blocks (aligned to context row 0) are
// decompressed (k = W_UK c, v = W_UV c, in double, 64 latent rows per pass) once for every query
// that sees a row of the block, and folded into each such query's running softmax state, six
// queries per register tile. A query's arithmetic depends only on its own rows: not on threads,
// other queries or how its prompt was chunked.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif
// GCC 12 flags the deliberately undefined pass-through operand of its own AVX-512 conversion
// intrinsics (vload_i8) as maybe uninitialized.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "kernels/attention.h"
#include "kernels/attention_rows.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#if defined(__AVX2__) && defined(__F16C__)
#include "quant/simd_avx2.h"
#endif

namespace mla {
namespace {

// The target's double vector: 8 lanes on AVX-512, 4 on AVX, 2 elsewhere.
#if defined(__AVX512F__)
constexpr int kD = 8;
#elif defined(__AVX__)
constexpr int kD = 4;
#else
constexpr int kD = 2;
#endif
using f64v = double __attribute__((vector_size(kD * sizeof(double))));
using i64v = long long __attribute__((vector_size(kD * sizeof(double))));

inline f64v vload(const double* p) {
  f64v v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void vstore(double* p, f64v v) { std::memcpy(p, &v, sizeof v); }
// (Not f64v{} + x: adding 0.0 is an operation the compiler must keep, since -0.0 + 0.0 is +0.0.)
inline f64v vsplat(double x) {
#if defined(__AVX512F__)
  return (f64v)_mm512_set1_pd(x);
#elif defined(__AVX__)
  return (f64v)_mm256_set1_pd(x);
#else
  return f64v{x, x};
#endif
}
inline f64v vfma(f64v a, f64v b, f64v c) {
#if defined(__AVX512F__)
  return (f64v)_mm512_fmadd_pd((__m512d)a, (__m512d)b, (__m512d)c);
#elif defined(__FMA__)
  return (f64v)_mm256_fmadd_pd((__m256d)a, (__m256d)b, (__m256d)c);
#else
  return a * b + c;
#endif
}
// kD F32 values widened to double (exactly).
inline f64v vload_f32(const float* p) {
#if defined(__AVX512F__)
  return (f64v)_mm512_cvtps_pd(_mm256_loadu_ps(p));
#elif defined(__AVX__)
  return (f64v)_mm256_cvtps_pd(_mm_loadu_ps(p));
#else
  f64v v;
  for (int k = 0; k < kD; ++k) v[k] = p[k];
  return v;
#endif
}
inline double hsum(f64v v) {
  double s = 0;
  for (int k = 0; k < kD; ++k) s += v[k];
  return s;
}
inline f64v vmax(f64v a, f64v b) { return a > b ? a : b; }

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// exp(x) for x <= 0 (and -inf) lane by lane to ~2 ulp of double: x = n ln2 + r with ln 2 in two
// parts (the first has trailing zero bits, so n · ln2_hi is exact), exp(r) by its Taylor series to
// degree 13 on |r| <= ln2 / 2 (truncation below 1e-17), 2^n put into the exponent. Below -708
// the result is 0 (exp underflows there anyway).
inline f64v exp_nonpos(f64v x) {
  const f64v lo = vsplat(-708.0);
  const auto under = x < lo;
  x = x > lo ? x : lo;
  const f64v magic = vsplat(6755399441055744.0);  // 1.5 · 2^52: adding it rounds to an integer
  const f64v t = vfma(x, vsplat(1.4426950408889634), magic);
  const f64v n = t - magic;
  f64v r = vfma(n, vsplat(-6.93147180369123816490e-01), x);
  r = vfma(n, vsplat(-1.90821492927058770002e-10), r);
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
  f64v p = vsplat(kC[0]);
  for (size_t k = 1; k < sizeof kC / sizeof kC[0]; ++k) p = vfma(p, r, vsplat(kC[k]));
  i64v ti, mi;
  std::memcpy(&ti, &t, sizeof t);
  std::memcpy(&mi, &magic, sizeof magic);
  const i64v bits = (ti - mi + 1023) << 52;
  f64v scale;
  std::memcpy(&scale, &bits, sizeof scale);
  const f64v y = p * scale;
  return under ? f64v{} : y;
}

inline double exp_nonpos1(double x) {
  f64v v = vsplat(x);
  return exp_nonpos(v)[0];
}

// out[r] = Σ_k a[k] · b[r · ldb + k] for R rows of b (F32, widened on load) against one vector a:
// R independent accumulators share each load of a.
template <int R>
void dots_d_f(const double* a, const float* b, int64_t ldb, int64_t n, double* out) {
  f64v acc[R] = {};
  int64_t k = 0;
  for (; k + kD <= n; k += kD) {
    const f64v x = vload(a + k);
    for (int r = 0; r < R; ++r) acc[r] = vfma(x, vload_f32(b + r * ldb + k), acc[r]);
  }
  for (int r = 0; r < R; ++r) {
    double t = hsum(acc[r]);
    for (int64_t j = k; j < n; ++j) t += a[j] * static_cast<double>(b[r * ldb + j]);
    out[r] = t;
  }
}

// out[r] = Σ_k a[k] · b[r · ldb + k] for rows r < n_rows, R at a time.
void rows_dot_d_f(const double* a, const float* b, int64_t ldb, int64_t n, int64_t n_rows, double* out) {
  constexpr int R = 8;
  int64_t r = 0;
  for (; r + R <= n_rows; r += R) dots_d_f<R>(a, b + r * ldb, ldb, n, out + r);
  for (; r < n_rows; ++r) dots_d_f<1>(a, b + r * ldb, ldb, n, out + r);
}

// ---- W_UK / W_UV dotted from their stored rows ----
//
// A Q8_0 value is d · q and a Q6_K value (d · sc) · q: an F32 scale times an integer level, and the
// F32 the dequantizer writes is that product exactly (fp16 d has 11 significant bits, sc 7, q 7 for
// Q8_0 and 5 for Q6_K: at most 23 bits), so Σ_k a_k w_k = Σ_g s_g Σ_{k in g} a_k q_k in real
// arithmetic. The dots below take levels and scales from the rows and sum in double, with no F32
// copy of the head (converting a head to F32 cost about three times the dots themselves). The
// result is the exact value to double rounding, as with the copy; only the association of the
// double sums differs, which the F32 output shows only for a value within ~1e-15 of a rounding
// midpoint. A query's dots do not depend on the other queries dotted with it.

constexpr int kLevelRows = 8;  // rows dotted together (independent FMA chains sharing each load of a)
constexpr int kQ6Group = 16;   // Q6_K elements per scale

inline float half_to_f32(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  return fp16_to_fp32(h);
#endif
}

// n elements (a multiple of 256) of one Q6_K row as signed levels q[n] and scales s[n / 16].
void unpack_q6_k(const uint8_t* row, int64_t n, int8_t* q, float* s) {
  const auto* b = reinterpret_cast<const quant::BlockQ6_K*>(row);
  for (int64_t i = 0; i < n / quant::kQK_K; ++i, q += quant::kQK_K, s += quant::kQK_K / kQ6Group) {
    const float d = half_to_f32(b[i].d);
    for (int g = 0; g < quant::kQK_K / kQ6Group; ++g) s[g] = d * b[i].scales[g];
#if defined(__AVX2__) && defined(__F16C__)
    const __m256i bias = _mm256_set1_epi8(32);
    for (int h = 0; h < 2; ++h) {
      __m256i v[4];
      quant::avx2::unpack_q6_k_half(b[i], h, v);
      for (int k = 0; k < 4; ++k)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 128 * h + 32 * k), _mm256_sub_epi8(v[k], bias));
    }
#else
    auto* u = reinterpret_cast<uint8_t*>(q);
    quant::q6_k_levels(b[i], u);
    for (int e = 0; e < quant::kQK_K; ++e) q[e] = static_cast<int8_t>(u[e] - 32);
#endif
  }
}

// kD int8 levels widened to double (exactly).
inline f64v vload_i8(const int8_t* p) {
#if defined(__AVX512F__)
  return (f64v)_mm512_cvtepi32_pd(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
#elif defined(__AVX__)
  int32_t w;
  std::memcpy(&w, p, sizeof w);
  return (f64v)_mm256_cvtepi32_pd(_mm_cvtepi8_epi32(_mm_cvtsi32_si128(w)));
#else
  f64v v;
  for (int k = 0; k < kD; ++k) v[k] = p[k];
  return v;
#endif
}

// out[r] = Σ_g s[r][g] · Σ_{k in g} a[k] · q[r][k] for R rows of levels (ldq apart; scales lds
// apart), groups of G elements; n a multiple of G.
template <int R, int G>
void dots_levels(const double* a, const int8_t* q, int64_t ldq, const float* s, int64_t lds, int64_t n, double* out) {
  static_assert(G % kD == 0, "a group is whole vectors");
  f64v tot[R] = {};
  for (int64_t g = 0; g < n / G; ++g) {
    f64v acc[R] = {};
#pragma GCC unroll 8
    for (int c = 0; c < G; c += kD) {
      const f64v x = vload(a + g * G + c);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r] = vfma(x, vload_i8(q + r * ldq + g * G + c), acc[r]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) tot[r] = vfma(acc[r], vsplat(s[r * lds + g]), tot[r]);
  }
  for (int r = 0; r < R; ++r) out[r] = hsum(tot[r]);
}

// The same over R Q8_0 rows in place (rb bytes apart): each block's levels and scale read from it.
template <int R>
void dots_q8_0(const double* a, const uint8_t* rows, int64_t rb, int64_t n, double* out) {
  f64v tot[R] = {};
  for (int64_t g = 0; g < n / quant::kQK; ++g) {
    f64v acc[R] = {};
    const uint8_t* blk = rows + g * static_cast<int64_t>(sizeof(quant::BlockQ8_0));
#pragma GCC unroll 8
    for (int c = 0; c < quant::kQK; c += kD) {
      const f64v x = vload(a + g * quant::kQK + c);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        acc[r] = vfma(x, vload_i8(reinterpret_cast<const quant::BlockQ8_0*>(blk + r * rb)->qs + c), acc[r]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const auto* b = reinterpret_cast<const quant::BlockQ8_0*>(blk + r * rb);
      tot[r] = vfma(acc[r], vsplat(half_to_f32(b->d)), tot[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum(tot[r]);
}

// True when proj_dots reads w's rows of `cols` elements as levels (Q8_0 in place, Q6_K unpacked).
bool dotted_from_levels(const MlaProj& w, int64_t cols) {
  if (!w.row_bytes) return false;
  return (w.type == GgmlType::Q8_0 && cols % quant::kQK == 0) || (w.type == GgmlType::Q6_K && cols % quant::kQK_K == 0);
}

// Room (in floats) proj_dots needs in buf for `rows` rows of `cols` elements.
int64_t proj_buffer_floats(int64_t rows, int64_t cols) { return std::max(rows * cols, kLevelRows * cols); }

// out[i][r] = Σ_k a[i][k] · W_h[r][k] for nq vectors a (lda apart) and head h's `rows` rows of
// `cols` elements (out rows ldo apart). Q8_0 / Q6_K rows are dotted from their levels, kLevelRows
// rows at a time for every vector while they sit in L1; other types through the head's F32 copy in
// buf (proj_buffer_floats).
void proj_dots(const MlaProj& w, int64_t h, int64_t rows, int64_t cols, int64_t nq, const double* a, int64_t lda,
               double* out, int64_t ldo, float* buf) {
  if (!dotted_from_levels(w, cols)) {
    const float* f = mla_proj_head(w, h, rows, cols, buf);
    for (int64_t i = 0; i < nq; ++i) rows_dot_d_f(a + i * lda, f, cols, cols, rows, out + i * ldo);
    return;
  }
  const int64_t rb = w.row_bytes, lds = cols / kQ6Group;
  const uint8_t* base = static_cast<const uint8_t*>(w.data) + h * (w.head_rows ? w.head_rows : rows) * rb;
  auto* lq = reinterpret_cast<int8_t*>(buf);  // Q6_K: kLevelRows rows of levels, then their scales
  float* ls = buf + kLevelRows * cols / 4;
  // R rows from r0 for every vector.
  auto pass = [&]<int R>(int64_t r0) {
    const uint8_t* row = base + r0 * rb;
    if (w.type == GgmlType::Q8_0) {
      for (int64_t i = 0; i < nq; ++i) dots_q8_0<R>(a + i * lda, row, rb, cols, out + i * ldo + r0);
      return;
    }
    for (int r = 0; r < R; ++r) unpack_q6_k(row + r * rb, cols, lq + r * cols, ls + r * lds);
    for (int64_t i = 0; i < nq; ++i) dots_levels<R, kQ6Group>(a + i * lda, lq, cols, ls, lds, cols, out + i * ldo + r0);
  };
  int64_t r0 = 0;
  for (; r0 + kLevelRows <= rows; r0 += kLevelRows) {
    // The rows stream from memory (a head is read once per step): ask for those two passes ahead.
    const int64_t p0 = std::min(rows, r0 + 2 * kLevelRows), p1 = std::min(rows, r0 + 3 * kLevelRows);
    for (int64_t b = p0 * rb; b < p1 * rb; b += 64) __builtin_prefetch(base + b);
    pass.template operator()<kLevelRows>(r0);
  }
  for (; r0 < rows; ++r0) pass.template operator()<1>(r0);
}

// Context row j as doubles into out (n = kv_lora + qk_rope values, then zeros up to ld).
inline void load_row_f64(const MlaAttnParams& p, DequantizeFn dq, int64_t j, float* fbuf, double* out, int64_t ld) {
  const int64_t n = p.kv_lora + p.qk_rope;
  attn::load_row(p, dq, j, fbuf);
  for (int64_t c = 0; c < n; ++c) out[c] = fbuf[c];
  for (int64_t c = n; c < ld; ++c) out[c] = 0.0;
}

// ---- MQA ----

// A part's state (max, sum, output per head: 256 KB at GLM-5's widths) is written once and read
// back by the fold, so parts are few and long: 16 of them (times the head groups, 4 at GLM-5's
// widths) still spread one query over 64 threads; 32 parts of 256 rows folded 8 MB per GLM-5
// layer at depth 8192.
constexpr int64_t kPartUnit = 512;  // a part is a whole number of these rows
constexpr int64_t kMaxParts = 16;   // a query's rows are split into at most this many parts
constexpr int64_t kTile = 64;       // rows converted to double at a time
constexpr int64_t kQueryBlock = 8;  // queries absorbed and attended per round (bounds the buffers)
constexpr int kMaxGroup = 16;       // heads whose scores and sums stay in registers together
// Accumulator registers a register tile uses: 16 of AVX-512's 32 (two FMA pipes of latency 4
// need 8 in flight), fewer where the register file has 16.
constexpr int kAccRegs = kD == 8 ? 16 : 8;

// Rows of a part of a query that attends n rows: a function of n alone (not of the batch or the
// threads), at most kMaxParts parts.
int64_t part_rows(int64_t n) {
  return kPartUnit * std::max<int64_t>(1, (n + kPartUnit * kMaxParts - 1) / (kPartUnit * kMaxParts));
}

// Scores of R tile rows for the NV head vectors of a group: s[r][lane] = Σ_c tile[r][c] · q[c][lane].
template <int R, int NV>
void score_rows(const double* tile, int64_t ldt, const double* q, int64_t ldq, int64_t n, double* s, int64_t lds) {
  f64v acc[R][NV] = {};
  for (int64_t c = 0; c < n; ++c) {
    f64v qv[NV];
    for (int v = 0; v < NV; ++v) qv[v] = vload(q + c * ldq + v * kD);
    for (int r = 0; r < R; ++r) {
      const f64v b = vsplat(tile[r * ldt + c]);
      for (int v = 0; v < NV; ++v) acc[r][v] = vfma(b, qv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) vstore(s + r * lds + v * kD, acc[r][v]);
}

// For C consecutive row elements c: o[c][lane] = alpha[lane] · o[c][lane] + Σ_r w[r][lane] ·
// tile[r][c], the NV head vectors of a group (o: [row elem][ldo], the group's heads at its start).
template <int C, int NV>
void weighted_cols(const double* w, int64_t ldw, const double* tile, int64_t ldt, int64_t nr, const f64v* alpha,
                   double* o, int64_t ldo) {
  f64v acc[C][NV];
  for (int c = 0; c < C; ++c)
    for (int v = 0; v < NV; ++v) acc[c][v] = vload(o + c * ldo + v * kD) * alpha[v];
  for (int64_t r = 0; r < nr; ++r) {
    f64v wv[NV];
    for (int v = 0; v < NV; ++v) wv[v] = vload(w + r * ldw + v * kD);
    for (int c = 0; c < C; ++c) {
      const f64v b = vsplat(tile[r * ldt + c]);
      for (int v = 0; v < NV; ++v) acc[c][v] = vfma(b, wv[v], acc[c][v]);
    }
  }
  for (int c = 0; c < C; ++c)
    for (int v = 0; v < NV; ++v) vstore(o + c * ldo + v * kD, acc[c][v]);
}

struct MqaLayout {
  int64_t row_len, ldt, kvp, group, n_groups, hp, part_doubles;
  explicit MqaLayout(const MlaAttnParams& p) {
    row_len = p.kv_lora + p.qk_rope;
    ldt = round_up(row_len, kD);
    kvp = round_up(p.kv_lora, kD);
    group = std::min<int64_t>(kMaxGroup, round_up(p.n_head, kD));
    hp = round_up(p.n_head, group);
    n_groups = hp / group;
    part_doubles = hp * (2 + kvp);  // max[hp], sum[hp], out[kvp][hp]
  }
};

// One (query, part) over head groups [g0, g1): the part's rows folded into (m, l, o) of each
// group's heads. Each tile of rows is converted to double once for all the groups. q: the query's
// absorbed rows [row elem][hp]; part: its partial, max[hp] | sum[hp] | out[kvp][hp].
template <int NV>
void mqa_part(const MlaAttnParams& p, DequantizeFn dq, const MqaLayout& L, const attn::QueryRows& rows, int64_t k0,
              int64_t k1, int64_t g0, int64_t g1, const double* q, float* fbuf, double* tile, double* s, double* part) {
  constexpr int G = NV * kD;
  constexpr int R = std::max(1, kAccRegs / NV);  // tile rows per score register tile
  constexpr int C = std::max(1, kAccRegs / NV);  // row elements per weighted register tile
  for (int64_t h = g0 * G; h < g1 * G; ++h) part[h] = -std::numeric_limits<double>::infinity(), part[L.hp + h] = 0;
  double* out = part + 2 * L.hp;
  for (int64_t c = 0; c < L.kvp; ++c) std::fill(out + c * L.hp + g0 * G, out + c * L.hp + g1 * G, 0.0);
  for (int64_t t0 = k0; t0 < k1; t0 += kTile) {
    const int64_t nr = std::min(kTile, k1 - t0);
    for (int64_t r = 0; r < nr; ++r) {
      if (t0 + r + 4 < k1) attn::prefetch_row(p, rows[t0 + r + 4]);
      load_row_f64(p, dq, rows[t0 + r], fbuf, tile + r * L.ldt, L.ldt);
    }
    for (int64_t g = g0; g < g1; ++g) {
      const double* qg = q + g * G;
      double* m = part + g * G;
      double* l = part + L.hp + g * G;
      double* o = out + g * G;
      int64_t r = 0;
      for (; r + R <= nr; r += R) score_rows<R, NV>(tile + r * L.ldt, L.ldt, qg, L.hp, L.row_len, s + r * G, G);
      for (; r < nr; ++r) score_rows<1, NV>(tile + r * L.ldt, L.ldt, qg, L.hp, L.row_len, s + r * G, G);
      // Online softmax in double: the tile's max, the running state rescaled to it, p = exp(s - m).
      f64v alpha[NV];
      for (int v = 0; v < NV; ++v) {
        f64v mx = vload(s + v * kD);
        for (int64_t k = 1; k < nr; ++k) mx = vmax(mx, vload(s + k * G + v * kD));
        const f64v m_old = vload(m + v * kD), m_new = vmax(m_old, mx);
        alpha[v] = exp_nonpos(m_old - m_new);  // 0 on the first tile (m_old = -inf), where o is 0
        vstore(m + v * kD, m_new);
        f64v sum = vload(l + v * kD) * alpha[v];
        for (int64_t k = 0; k < nr; ++k) {
          const f64v e = exp_nonpos(vload(s + k * G + v * kD) - m_new);
          vstore(s + k * G + v * kD, e);
          sum += e;
        }
        vstore(l + v * kD, sum);
      }
      int64_t c = 0;
      for (; c + C <= L.kvp; c += C) weighted_cols<C, NV>(s, G, tile + c, L.ldt, nr, alpha, o + c * L.hp, L.hp);
      for (; c < L.kvp; ++c) weighted_cols<1, NV>(s, G, tile + c, L.ldt, nr, alpha, o + c * L.hp, L.hp);
    }
  }
}

using MqaPartFn = decltype(&mqa_part<1>);
MqaPartFn mqa_part_fn(int64_t group) {
  switch (group / kD) {
    case 1:
      return mqa_part<1>;
    case 2:
      return mqa_part<2>;
#if !defined(__AVX512F__)
    case 3:
      return mqa_part<3>;
    case 4:
      return mqa_part<4>;
#endif
#if !defined(__AVX512F__) && !defined(__AVX__)
    case 5:
      return mqa_part<5>;
    case 6:
      return mqa_part<6>;
    case 7:
      return mqa_part<7>;
    case 8:
      return mqa_part<8>;
#endif
    default:
      return nullptr;
  }
}

// (m, l, o) <- the fold of (m, l, o) and (m2, l2, o2) for heads h0 <= h < h1 (o: [kvp][hp]; a, b:
// scratch indexed by head).
void fold(double* m, double* l, double* o, const double* m2, const double* l2, const double* o2, int64_t h0, int64_t h1,
          int64_t hp, int64_t kvp, double* a, double* b) {
  for (int64_t h = h0; h < h1; ++h) {
    const double mx = std::max(m[h], m2[h]);
    a[h] = exp_nonpos1(m[h] - mx), b[h] = exp_nonpos1(m2[h] - mx);
    m[h] = mx;
    l[h] = l[h] * a[h] + l2[h] * b[h];
  }
  for (int64_t c = 0; c < kvp; ++c)
    for (int64_t h = h0; h < h1; ++h) o[c * hp + h] = o[c * hp + h] * a[h] + o2[c * hp + h] * b[h];
}

// Grows every thread's double buffer (AttnScratch::exact_per_thread) to n values; before a
// parallel region, where resizing would race. Inside it, thread t uses exact_per_thread[t].data().
void reserve_thread_buffers(AttnScratch& s, int n_threads, size_t n) {
  if (static_cast<int>(s.exact_per_thread.size()) < n_threads) s.exact_per_thread.resize(n_threads);
  for (auto& v : s.exact_per_thread)
    if (v.size() < n) v.resize(n);
}

}  // namespace

void mla_attention_mqa_exact(const MlaAttnParams& p, ThreadPool& pool, AttnScratch& scratch) {
  const MqaLayout L(p);
  const int nt = pool.n_threads();
  const int64_t qk_head = p.qk_nope + p.qk_rope;
  const DequantizeFn dq = p.cache_type == GgmlType::F32 ? nullptr : dequantize_fn(p.cache_type);
  const MqaPartFn part_fn = mqa_part_fn(L.group);
  // Per thread: the F32 row (as doubles' room), the tile, the scores, one query in double.
  // (The absorb and un-absorb use the same buffer for their vectors and dots: kQueryBlock of each.)
  const size_t per_thread = static_cast<size_t>(
      std::max(L.ldt + kTile * L.ldt + kTile * L.group, kQueryBlock * (p.kv_lora + std::max(p.qk_nope, p.v_dim))));
  reserve_thread_buffers(scratch, nt, per_thread);
  attn::reserve_head_buffers(
      scratch, nt,
      static_cast<size_t>(std::max(proj_buffer_floats(p.kv_lora, p.qk_nope), proj_buffer_floats(p.v_dim, p.kv_lora))));
  auto parts_of = [&](int64_t i) {
    const int64_t n = attn::rows_of(p, i).n;
    return (n + part_rows(n) - 1) / part_rows(n);
  };

  for (int64_t qb = 0; qb < p.n_q; qb += kQueryBlock) {
    const int64_t nq = std::min(kQueryBlock, p.n_q - qb);
    int64_t part_base[kQueryBlock + 1];
    part_base[0] = 0;
    for (int64_t i = 0; i < nq; ++i) part_base[i + 1] = part_base[i] + parts_of(qb + i);
    const int64_t n_parts = part_base[nq];
    const size_t q_doubles = static_cast<size_t>(nq * L.row_len * L.hp);
    if (scratch.exact_q.size() < q_doubles) scratch.exact_q.resize(q_doubles);
    std::fill(scratch.exact_q.begin(), scratch.exact_q.begin() + q_doubles, 0.0);  // padded heads score 0
    const size_t part_doubles = static_cast<size_t>(n_parts * L.part_doubles);
    if (scratch.exact_parts.size() < part_doubles) scratch.exact_parts.resize(part_doubles);
    double* qt = scratch.exact_q.data();
    double* parts = scratch.exact_parts.data();

    // 1. Absorb: qt[i][c][h] = kq_scale · Σ_d W_UK[h][c][d] q_nope[i][h][d]; q_pe · kq_scale after it.
    pool.parallel_for(p.n_head, [&](int64_t h0, int64_t h1, int t) {
      double* qd = scratch.exact_per_thread[t].data();  // [nq][qk_nope]: the queries' q_nope in double
      double* dots = qd + nq * p.qk_nope;               // [nq][kv_lora]
      for (int64_t h = h0; h < h1; ++h) {
        for (int64_t i = 0; i < nq; ++i) {
          const float* q = p.q + (qb + i) * p.q_stride + h * qk_head;
          for (int64_t d = 0; d < p.qk_nope; ++d) qd[i * p.qk_nope + d] = q[d];
        }
        proj_dots(p.w_uk, h, p.kv_lora, p.qk_nope, nq, qd, p.qk_nope, dots, p.kv_lora, scratch.heads[t].data());
        for (int64_t i = 0; i < nq; ++i) {
          const float* q = p.q + (qb + i) * p.q_stride + h * qk_head;
          double* q_i = qt + i * L.row_len * L.hp;
          for (int64_t c = 0; c < p.kv_lora; ++c) q_i[c * L.hp + h] = dots[i * p.kv_lora + c] * p.kq_scale;
          for (int64_t d = 0; d < p.qk_rope; ++d)
            q_i[(p.kv_lora + d) * L.hp + h] = static_cast<double>(q[p.qk_nope + d]) * p.kq_scale;
        }
      }
    });

    // 2. Attend: units (query, part, share of the head groups), taken in any order by any thread;
    //    the groups are split only when there are fewer parts than threads. A group's arithmetic
    //    does not depend on the unit or the thread that runs it.
    const int64_t n_split = std::clamp<int64_t>((nt + n_parts - 1) / n_parts, 1, L.n_groups);
    const int64_t n_units = n_parts * n_split;
    std::atomic<int64_t> next{0};
    auto attend = [&](int t) {
      double* b = scratch.exact_per_thread[t].data();
      float* fbuf = reinterpret_cast<float*>(b);
      double* tile = b + L.ldt;
      double* s = tile + kTile * L.ldt;
      for (int64_t u; (u = next.fetch_add(1, std::memory_order_relaxed)) < n_units;) {
        const int64_t k = u % n_split, part_index = u / n_split;
        int64_t i = 0;
        while (part_base[i + 1] <= part_index) ++i;
        const attn::QueryRows rows = attn::rows_of(p, qb + i);
        const int64_t pr = part_rows(rows.n);
        const int64_t k0 = (part_index - part_base[i]) * pr, k1 = std::min(rows.n, k0 + pr);
        part_fn(p, dq, L, rows, k0, k1, k * L.n_groups / n_split, (k + 1) * L.n_groups / n_split,
                qt + i * L.row_len * L.hp, fbuf, tile, s, parts + part_index * L.part_doubles);
      }
    };
    if (n_units > 0) pool.run(attend);

    // 3. Fold each query's parts in order (heads split over the threads: a head's fold is the same
    //    whoever runs it), then un-absorb and normalize:
    //    out[i][h][e] = (Σ_c W_UV[h][e][c] o[i][h][c]) / l[i][h], rounded to F32 once.
    pool.parallel_for(p.n_head, [&](int64_t h0, int64_t h1, int t) {
      double* ab = scratch.exact_per_thread[t].data();  // the fold's per-head scales
      for (int64_t i = 0; i < nq; ++i) {
        double* first = parts + part_base[i] * L.part_doubles;
        for (int64_t k = part_base[i] + 1; k < part_base[i + 1]; ++k) {
          const double* other = parts + k * L.part_doubles;
          fold(first, first + L.hp, first + 2 * L.hp, other, other + L.hp, other + 2 * L.hp, h0, h1, L.hp, L.kvp, ab,
               ab + L.hp);
        }
      }
    });
    pool.parallel_for(p.n_head, [&](int64_t h0, int64_t h1, int t) {
      double* o = scratch.exact_per_thread[t].data();  // [nq][kv_lora]: head h's column of each folded output
      double* dots = o + nq * p.kv_lora;               // [nq][v_dim]
      for (int64_t h = h0; h < h1; ++h) {
        for (int64_t i = 0; i < nq; ++i) {
          const double* first = parts + part_base[i] * L.part_doubles;
          for (int64_t c = 0; c < p.kv_lora; ++c) o[i * p.kv_lora + c] = first[2 * L.hp + c * L.hp + h];
        }
        proj_dots(p.w_uv, h, p.v_dim, p.kv_lora, nq, o, p.kv_lora, dots, p.v_dim, scratch.heads[t].data());
        for (int64_t i = 0; i < nq; ++i) {
          const double l = parts[part_base[i] * L.part_doubles + L.hp + h];
          float* out = p.out + (qb + i) * p.out_stride + h * p.v_dim;
          for (int64_t e = 0; e < p.v_dim; ++e) out[e] = static_cast<float>(dots[i * p.v_dim + e] / l);
        }
      }
    });
  }
}

// ---- MHA ----

namespace {

constexpr int64_t kKeyBlock = 64;                      // context rows decompressed at a time, from row 0
constexpr int kNJ = static_cast<int>(kKeyBlock / kD);  // row vectors in a block
// Register tiles: kTQ queries (or decompressed outputs) x kJV row (or value) vectors, 24
// accumulators on AVX-512 (12 where the register file has 16): each vector loaded from the block
// feeds kTQ FMAs and each broadcast kJV. (4 x 4 tiles ran at 79% of the FMA peak from L1 here,
// 6 x 4 at 100%, and the kernel twice as fast as with 2 x 8 tiles.)
constexpr int kJV = kD == 8 ? 4 : 2;
constexpr int kTQ = 6;
static_assert(kNJ % kJV == 0, "a block is a whole number of register tiles");
constexpr int64_t kRChunk = 64;  // latent rows of the block decompressed per pass (64 x 64 doubles: in L1)

// out[d][j] (+)= Σ_{r0 <= r < r1} wd[d][r - r0] · ct[r][j] for ND outputs from d0 and the kJV row
// vectors from jv0 (wd: those outputs' W values of the pass in double, kRChunk apart; first: start
// from zero, else from out).
template <int ND>
void decompress_tile(const double* ct, const double* wd, int64_t r0, int64_t r1, int64_t d0, int jv0, double* out,
                     bool first) {
  f64v a[ND][kJV];
  for (int d = 0; d < ND; ++d)
    for (int v = 0; v < kJV; ++v) a[d][v] = first ? f64v{} : vload(out + (d0 + d) * kKeyBlock + (jv0 + v) * kD);
  for (int64_t r = r0; r < r1; ++r) {
    f64v x[kJV];
    for (int v = 0; v < kJV; ++v) x[v] = vload(ct + r * kKeyBlock + (jv0 + v) * kD);
    for (int d = 0; d < ND; ++d) {
      const f64v b = vsplat(wd[d * kRChunk + (r - r0)]);
      for (int v = 0; v < kJV; ++v) a[d][v] = vfma(b, x[v], a[d][v]);
    }
  }
  for (int d = 0; d < ND; ++d)
    for (int v = 0; v < kJV; ++v) vstore(out + (d0 + d) * kKeyBlock + (jv0 + v) * kD, a[d][v]);
}

// A head's W rows [n_out][kv_lora] (F32) widened to double once, laid out for decompress_t: pass
// by pass (kRChunk latent rows each), the pass's values of each output kRChunk apart.
int64_t pass_doubles(int64_t n_out, int64_t kv_lora) { return n_out * round_up(kv_lora, kRChunk); }
void widen_passes(const float* w, int64_t n_out, int64_t kv_lora, double* wd) {
  for (int64_t r0 = 0; r0 < kv_lora; r0 += kRChunk) {
    const int64_t r1 = std::min(kv_lora, r0 + kRChunk);
    double* pass = wd + n_out * r0;
    for (int64_t d = 0; d < n_out; ++d)
      for (int64_t r = r0; r < r1; ++r) pass[d * kRChunk + (r - r0)] = w[d * kv_lora + r];
  }
}

// out[d][j] = Σ_r w[d][r] · ct[r][j] for d < n_out and the block's rows j (ct: the key tile
// transposed, [kv_lora][kKeyBlock]; wd: W widened by widen_passes); the latent rows in kRChunk
// passes (each output's sum runs over r in order whatever the pass).
void decompress_t(const double* ct, const double* wd, int64_t n_out, int64_t kv_lora, double* out) {
  for (int64_t r0 = 0; r0 < kv_lora; r0 += kRChunk) {
    const int64_t r1 = std::min(kv_lora, r0 + kRChunk);
    const double* pass = wd + n_out * r0;
    for (int64_t d = 0; d < n_out; d += kTQ) {
      const int nd = static_cast<int>(std::min<int64_t>(kTQ, n_out - d));
      const double* w = pass + d * kRChunk;
      for (int jv0 = 0; jv0 < kNJ; jv0 += kJV) {
        if (nd == kTQ) {
          decompress_tile<kTQ>(ct, w, r0, r1, d, jv0, out, r0 == 0);
        } else {
          for (int k = 0; k < nd; ++k) decompress_tile<1>(ct, w + k * kRChunk, r0, r1, d + k, jv0, out, r0 == 0);
        }
      }
    }
  }
}

// s[q][j] = Σ_d qd[q][d] · kt[d][j] over the block's rows, for Q queries (kt: [qk_head][kKeyBlock]).
template <int Q>
void block_scores(const double* const* qd, const double* kt, int64_t qk_head, double* s) {
  for (int jv0 = 0; jv0 < kNJ; jv0 += kJV) {
    f64v a[Q][kJV] = {};
    for (int64_t d = 0; d < qk_head; ++d) {
      f64v x[kJV];
      for (int v = 0; v < kJV; ++v) x[v] = vload(kt + d * kKeyBlock + (jv0 + v) * kD);
      for (int q = 0; q < Q; ++q) {
        const f64v b = vsplat(qd[q][d]);
        for (int v = 0; v < kJV; ++v) a[q][v] = vfma(b, x[v], a[q][v]);
      }
    }
    for (int q = 0; q < Q; ++q)
      for (int v = 0; v < kJV; ++v) vstore(s + q * kKeyBlock + (jv0 + v) * kD, a[q][v]);
  }
}

// acc[q][e] += Σ_j w[q][j] · v[j][e] over rows j < nr (a row a query does not see has w = 0, which
// adds exactly nothing); v: [kKeyBlock][ldv], ldv a multiple of kJV vectors.
template <int Q>
void block_values(const double* w, const double* v, int64_t ldv, int64_t nr, double* const* acc) {
  for (int64_t e0 = 0; e0 < ldv; e0 += kJV * kD) {
    f64v a[Q][kJV];
    for (int q = 0; q < Q; ++q)
      for (int k = 0; k < kJV; ++k) a[q][k] = vload(acc[q] + e0 + k * kD);
    for (int64_t j = 0; j < nr; ++j) {
      f64v x[kJV];
      for (int k = 0; k < kJV; ++k) x[k] = vload(v + j * ldv + e0 + k * kD);
      for (int q = 0; q < Q; ++q) {
        const f64v b = vsplat(w[q * kKeyBlock + j]);
        for (int k = 0; k < kJV; ++k) a[q][k] = vfma(b, x[k], a[q][k]);
      }
    }
    for (int q = 0; q < Q; ++q)
      for (int k = 0; k < kJV; ++k) vstore(acc[q] + e0 + k * kD, a[q][k]);
  }
}

using BlockScoresFn = decltype(&block_scores<1>);
using BlockValuesFn = decltype(&block_values<1>);
template <int... Q>
constexpr std::array<BlockScoresFn, sizeof...(Q)> scores_table(std::integer_sequence<int, Q...>) {
  return {block_scores<Q + 1>...};
}
template <int... Q>
constexpr std::array<BlockValuesFn, sizeof...(Q)> values_table(std::integer_sequence<int, Q...>) {
  return {block_values<Q + 1>...};
}
constexpr auto kBlockScores = scores_table(std::make_integer_sequence<int, kTQ>{});  // [q - 1]: q queries
constexpr auto kBlockValues = values_table(std::make_integer_sequence<int, kTQ>{});

// One query's running softmax over a block: s (its scores, unscaled) becomes its weights, with
// rows it does not see (visible[j] false) at -inf and so weight 0; m, l and acc rescaled to the
// new max. Every lane of the block is processed, so the work does not depend on nr.
void block_softmax(double* s, const bool* visible, double kq_scale, double& m, double& l, double* acc, int64_t ldv) {
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < kKeyBlock; ++j) s[j] = visible[j] ? s[j] * kq_scale : kNegInf;
  f64v mx = vload(s);
  for (int v = 1; v < kNJ; ++v) mx = vmax(mx, vload(s + v * kD));
  double m_new = m;
  for (int k = 0; k < kD; ++k) m_new = std::max(m_new, mx[k]);
  const double alpha = exp_nonpos1(m - m_new);
  m = m_new;
  f64v sum{};
  const f64v mv = vsplat(m_new);
  for (int v = 0; v < kNJ; ++v) {
    const f64v e = exp_nonpos(vload(s + v * kD) - mv);
    vstore(s + v * kD, e);
    sum += e;
  }
  l = l * alpha + hsum(sum);
  if (alpha != 1.0)
    for (int64_t e = 0; e < ldv; ++e) acc[e] *= alpha;
}

}  // namespace

void mla_attention_mha_exact(const MlaAttnParams& p, ThreadPool& pool, AttnScratch& scratch) {
  const int nt = pool.n_threads();
  const int64_t qk_head = p.qk_nope + p.qk_rope, row_len = p.kv_lora + p.qk_rope;
  const int64_t ldv = round_up(p.v_dim, kJV * kD);
  const DequantizeFn dq = p.cache_type == GgmlType::F32 ? nullptr : dequantize_fn(p.cache_type);
  // Per thread: 8 F32 rows, the key tile transposed ct [row_len][kKeyBlock], kt [qk_head][kKeyBlock]
  // (W_UK c, then k_pe), vt [v_dim][kKeyBlock] (W_UV c) and v [kKeyBlock][ldv], kTQ queries' scores,
  // the head's W_UK and W_UV widened to double once (widen_passes: 1.8 MB at GLM-5's widths; each
  // value serves every block, where converting per block cost 6% of the kernel), and the head's
  // queries in double qd [n_q][qk_head] with their state m, l, acc [n_q][ldv].
  const int64_t tile = row_len * kKeyBlock + qk_head * kKeyBlock + p.v_dim * kKeyBlock + kKeyBlock * ldv;
  const size_t per_thread =
      static_cast<size_t>(4 * row_len + tile + kTQ * kKeyBlock + pass_doubles(p.qk_nope, p.kv_lora) +
                          pass_doubles(p.v_dim, p.kv_lora) + p.n_q * (qk_head + 2 + ldv));
  reserve_thread_buffers(scratch, nt, per_thread);
  attn::reserve_head_buffers(scratch, nt, static_cast<size_t>((p.qk_nope + p.v_dim) * p.kv_lora));
  if (static_cast<int>(scratch.exact_rows.size()) < nt) scratch.exact_rows.resize(nt);
  for (auto& v : scratch.exact_rows)
    if (v.size() < static_cast<size_t>(2 * p.n_q)) v.resize(static_cast<size_t>(2 * p.n_q));
  // The rows past the last one any query sees are never read.
  int64_t n_rows = 0;
  for (int64_t i = 0; i < p.n_q; ++i) {
    const attn::QueryRows rows = attn::rows_of(p, i);
    if (rows.n > 0) n_rows = std::max(n_rows, rows[rows.n - 1] + 1);
  }

  pool.parallel_for(p.n_head, [&](int64_t h0, int64_t h1, int t) {
    double* b = scratch.exact_per_thread[t].data();
    float* fbuf = reinterpret_cast<float*>(b);
    double* ct = b + 4 * row_len;
    double* kt = ct + row_len * kKeyBlock;
    double* vt = kt + qk_head * kKeyBlock;
    double* vr = vt + p.v_dim * kKeyBlock;
    double* sc = vr + kKeyBlock * ldv;
    double* wkd = sc + kTQ * kKeyBlock;  // the head's W_UK and W_UV in double (widen_passes)
    double* wvd = wkd + pass_doubles(p.qk_nope, p.kv_lora);
    double* qd = wvd + pass_doubles(p.v_dim, p.kv_lora);
    double* m = qd + p.n_q * qk_head;
    double* l = m + p.n_q;
    double* acc = l + p.n_q;
    // Per query: the next selected row (sparse); the block's queries, n_rel of them.
    int64_t* cursor = scratch.exact_rows[t].data();
    int64_t* rel = cursor + p.n_q;
    int64_t n_rel = 0;
    bool vis[kTQ * kKeyBlock];  // which rows of the block each of the tile's queries sees
    for (int64_t h = h0; h < h1; ++h) {
      float* wbuf = scratch.heads[t].data();
      const float* wk = mla_proj_head(p.w_uk_t, h, p.qk_nope, p.kv_lora, wbuf);  // [qk_nope][kv_lora]
      const float* wv = mla_proj_head(p.w_uv, h, p.v_dim, p.kv_lora, wbuf + p.qk_nope * p.kv_lora);
      widen_passes(wk, p.qk_nope, p.kv_lora, wkd);
      widen_passes(wv, p.v_dim, p.kv_lora, wvd);
      for (int64_t i = 0; i < p.n_q; ++i) {
        const float* q = p.q + i * p.q_stride + h * qk_head;
        for (int64_t d = 0; d < qk_head; ++d) qd[i * qk_head + d] = q[d];
        m[i] = -std::numeric_limits<double>::infinity();
        l[i] = 0;
        std::fill(acc + i * ldv, acc + (i + 1) * ldv, 0.0);
        cursor[i] = 0;
      }
      for (int64_t j0 = 0; j0 < n_rows; j0 += kKeyBlock) {
        const int64_t nr = std::min(kKeyBlock, n_rows - j0);
        // The queries that see a row of this block.
        n_rel = 0;
        for (int64_t i = 0; i < p.n_q; ++i) {
          const attn::QueryRows rows = attn::rows_of(p, i);
          if (rows.list ? (cursor[i] < rows.n && rows[cursor[i]] < j0 + nr) : rows.n > j0) rel[n_rel++] = i;
        }
        if (n_rel == 0) continue;
        // The block's rows transposed into ct, 8 rows at a time (each 64-byte line of ct written
        // whole); rows past nr are zeros.
        for (int64_t r0 = 0; r0 < kKeyBlock; r0 += 8) {
          for (int64_t k = 0; k < 8; ++k) {
            float* f = fbuf + k * row_len;
            if (r0 + k < nr)
              attn::load_row(p, dq, j0 + r0 + k, f);
            else
              std::fill(f, f + row_len, 0.0f);
          }
          for (int64_t c = 0; c < row_len; ++c)
            for (int64_t k = 0; k < 8; ++k) ct[c * kKeyBlock + r0 + k] = fbuf[k * row_len + c];
        }
        // k = [W_UK c | k_pe] and v = W_UV c of the block's rows.
        decompress_t(ct, wkd, p.qk_nope, p.kv_lora, kt);
        std::memcpy(kt + p.qk_nope * kKeyBlock, ct + p.kv_lora * kKeyBlock, sizeof(double) * p.qk_rope * kKeyBlock);
        decompress_t(ct, wvd, p.v_dim, p.kv_lora, vt);
        for (int64_t j = 0; j < kKeyBlock; ++j) {
          for (int64_t e = 0; e < p.v_dim; ++e) vr[j * ldv + e] = vt[e * kKeyBlock + j];
          for (int64_t e = p.v_dim; e < ldv; ++e) vr[j * ldv + e] = 0.0;
        }
        // Queries kTQ at a time: scores, each one's softmax step, then the weighted values.
        for (int64_t k = 0; k < n_rel; k += kTQ) {
          const int nq = static_cast<int>(std::min<int64_t>(kTQ, n_rel - k));
          const double* qs[kTQ];
          double* accs[kTQ];
          for (int u = 0; u < nq; ++u) {
            const int64_t i = rel[k + u];
            qs[u] = qd + i * qk_head;
            accs[u] = acc + i * ldv;
            const attn::QueryRows rows = attn::rows_of(p, i);
            bool* v = vis + u * kKeyBlock;
            std::fill(v, v + kKeyBlock, false);
            if (rows.list) {
              for (; cursor[i] < rows.n && rows[cursor[i]] < j0 + nr; ++cursor[i]) v[rows[cursor[i]] - j0] = true;
            } else {
              std::fill(v, v + std::clamp<int64_t>(rows.n - j0, 0, nr), true);
            }
          }
          kBlockScores[nq - 1](qs, kt, qk_head, sc);
          for (int u = 0; u < nq; ++u) {
            const int64_t i = rel[k + u];
            block_softmax(sc + u * kKeyBlock, vis + u * kKeyBlock, p.kq_scale, m[i], l[i], accs[u], ldv);
          }
          kBlockValues[nq - 1](sc, vr, ldv, nr, accs);
        }
      }
      for (int64_t i = 0; i < p.n_q; ++i) {
        float* out = p.out + i * p.out_stride + h * p.v_dim;
        for (int64_t e = 0; e < p.v_dim; ++e) out[e] = static_cast<float>(acc[i * ldv + e] / l[i]);
      }
    }
  });
}

}  // namespace mla
