// W_UK / W_UV dotted from their stored rows, in double, for the exact MLA attention kernels
// (attention_exact.h).
//
// A Q8_0 or Q6_0 value is d · q and a Q6_K value (d · sc) · q: an F32 scale times an integer level,
// and the F32 the dequantizer writes is that product exactly (fp16 d has 11 significant bits, sc 7,
// q 7 for Q8_0 and 5 for Q6_0 and Q6_K: at most 23 bits), so Σ_k a_k w_k = Σ_g s_g Σ_{k in g} a_k q_k in real
// arithmetic. The dots below take levels and scales from the rows and sum in double, with no F32
// copy of the head (converting a head to F32 cost about three times the dots themselves). The
// result is the exact value to double rounding, as with the copy; only the association of the
// double sums differs, which the F32 output shows only for a value within ~1e-15 of a rounding
// midpoint. A query's dots do not depend on the other queries dotted with it.
#include <algorithm>
#include <cstring>
#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif
// GCC 12 flags the deliberately undefined pass-through operand of its own AVX-512 conversion
// intrinsics (simd::widen_i8) as maybe uninitialized.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "kernels/attention_exact.h"
#include "kernels/simd.h"
#include "quant/iqk_blocks.h"
#include "quant/quant.h"
#include "util/ggml_blocks.h"
#if defined(__AVX2__) && defined(__F16C__)
#include "quant/simd_avx2.h"
#endif

namespace mla::exact {
namespace {

using namespace simd;  // NOLINT(google-build-using-namespace): the kernels' vector vocabulary

// out[r] = Σ_k a[k] · b[r · ldb + k] for R rows of b (F32, widened on load) against one vector a:
// R independent accumulators share each load of a.
template <int R>
void dots_d_f(const double* a, const float* b, int64_t ldb, int64_t n, double* out) {
  f64v acc[R] = {};
  int64_t k = 0;
  for (; k + kF64Lanes <= n; k += kF64Lanes) {
    const f64v x = load(a + k);
    for (int r = 0; r < R; ++r) acc[r] = fmav(x, widen_f32(b + r * ldb + k), acc[r]);
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

// n elements (a multiple of 32) of one Q6_0 row (ik_llama.cpp's attn_k_b / attn_v_b type) as
// signed levels q[n] and scales s[n / 32].
void unpack_q6_0(const uint8_t* row, int64_t n, int8_t* q, float* s) {
  const auto* b = reinterpret_cast<const quant::BlockQ6_0*>(row);
  for (int64_t i = 0; i < n / quant::kQK; ++i, q += quant::kQK) {
    s[i] = half_to_f32(b[i].d);
#if defined(__AVX2__) && defined(__F16C__)
    // Top bits: element j < 16 at bits 4(j/8).. of qh[j%8], element j + 16 two bits above.
    const __m128i h8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b[i].qh));
    const __m128i h16 = _mm_unpacklo_epi64(h8, _mm_srli_epi16(h8, 4));
    const __m256i top = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(h16, 2), h16), _mm256_set1_epi8(3));
    const __m256i lv = _mm256_or_si256(quant::avx2::unpack_nibbles_32(b[i].qs), _mm256_slli_epi16(top, 4));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), _mm256_sub_epi8(lv, _mm256_set1_epi8(32)));
#else
    int lv[quant::kQK];
    quant::q6_0_levels(b[i], lv);
    for (int e = 0; e < quant::kQK; ++e) q[e] = static_cast<int8_t>(lv[e]);
#endif
  }
}

// out[r] = Σ_g s[r][g] · Σ_{k in g} a[k] · q[r][k] for R rows of levels (ldq apart; scales lds
// apart), groups of G elements; n a multiple of G.
template <int R, int G>
void dots_levels(const double* a, const int8_t* q, int64_t ldq, const float* s, int64_t lds, int64_t n, double* out) {
  static_assert(G % kF64Lanes == 0, "a group is whole vectors");
  f64v tot[R] = {};
  for (int64_t g = 0; g < n / G; ++g) {
    f64v acc[R] = {};
#pragma GCC unroll 8
    for (int c = 0; c < G; c += kF64Lanes) {
      const f64v x = load(a + g * G + c);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r] = fmav(x, widen_i8(q + r * ldq + g * G + c), acc[r]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) tot[r] = fmav(acc[r], splat(static_cast<double>(s[r * lds + g])), tot[r]);
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
    for (int c = 0; c < quant::kQK; c += kF64Lanes) {
      const f64v x = load(a + g * quant::kQK + c);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        acc[r] = fmav(x, widen_i8(reinterpret_cast<const quant::BlockQ8_0*>(blk + r * rb)->qs + c), acc[r]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const auto* b = reinterpret_cast<const quant::BlockQ8_0*>(blk + r * rb);
      tot[r] = fmav(acc[r], splat(static_cast<double>(half_to_f32(b->d))), tot[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum(tot[r]);
}

// True when proj_dots reads w's rows of `cols` elements as levels (Q8_0 in place, Q6_0 and Q6_K
// unpacked).
bool dotted_from_levels(const MlaProj& w, int64_t cols) {
  if (!w.row_bytes) return false;
  return ((w.type == GgmlType::Q8_0 || w.type == GgmlType::Q6_0) && cols % quant::kQK == 0) ||
         (w.type == GgmlType::Q6_K && cols % quant::kQK_K == 0);
}

}  // namespace

int64_t proj_buffer_floats(int64_t rows, int64_t cols) { return std::max(rows * cols, kLevelRows * cols); }

// Q8_0 / Q6_0 / Q6_K rows kLevelRows at a time for every vector, while they sit in L1.
void proj_dots(const MlaProj& w, int64_t h, int64_t rows, int64_t cols, int64_t nq, const double* a, int64_t lda,
               double* out, int64_t ldo, float* buf) {
  if (!dotted_from_levels(w, cols)) {
    const float* f = mla_proj_head(w, h, rows, cols, buf);
    for (int64_t i = 0; i < nq; ++i) rows_dot_d_f(a + i * lda, f, cols, cols, rows, out + i * ldo);
    return;
  }
  const bool q6_0 = w.type == GgmlType::Q6_0;
  const int64_t rb = w.row_bytes, lds = cols / (q6_0 ? quant::kQK : kQ6Group);
  const uint8_t* base = static_cast<const uint8_t*>(w.data) + h * (w.head_rows ? w.head_rows : rows) * rb;
  auto* lq = reinterpret_cast<int8_t*>(buf);  // Q6_0 / Q6_K: kLevelRows rows of levels, then their scales
  float* ls = buf + kLevelRows * cols / 4;
  // R rows from r0 for every vector.
  auto pass = [&]<int R>(int64_t r0) {
    const uint8_t* row = base + r0 * rb;
    if (w.type == GgmlType::Q8_0) {
      for (int64_t i = 0; i < nq; ++i) dots_q8_0<R>(a + i * lda, row, rb, cols, out + i * ldo + r0);
      return;
    }
    if (q6_0) {
      for (int r = 0; r < R; ++r) unpack_q6_0(row + r * rb, cols, lq + r * cols, ls + r * lds);
      for (int64_t i = 0; i < nq; ++i)
        dots_levels<R, quant::kQK>(a + i * lda, lq, cols, ls, lds, cols, out + i * ldo + r0);
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

void reserve_thread_buffers(AttnScratch& s, int n_threads, size_t n) {
  if (static_cast<int>(s.exact_per_thread.size()) < n_threads) s.exact_per_thread.resize(n_threads);
  for (auto& v : s.exact_per_thread)
    if (v.size() < n) v.resize(n);
}

}  // namespace mla::exact
