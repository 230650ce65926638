#include "kernels/indexer.h"

#include <algorithm>
#include <cstring>

#include "kernels/simd16.h"
#include "kernels/vec.h"
#include "quant/quant.h"

namespace mla {
namespace {

using simd::f32x16;

constexpr int64_t kChunk = 64;  // keys converted and scored per tile

int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

struct Shape {
  int64_t ld;  // F32 key tile row stride
  int64_t hp;  // heads rounded up to 16
  explicit Shape(const IndexerParams& p) : ld(round16(p.head_dim)), hp(round16(p.n_head)) {}
  size_t work_floats() const { return static_cast<size_t>(kChunk * ld + kChunk * hp + hp); }
};

const uint8_t* key_of(const IndexerParams& p, int64_t j) {
  return static_cast<const uint8_t*>(p.keys) + p.slots[j] * p.key_row_bytes;
}

void load_key(const IndexerParams& p, DequantizeFn dq, int64_t j, float* out) {
  if (p.key_type == GgmlType::F32)
    std::memcpy(out, key_of(p, j), sizeof(float) * p.head_dim);
  else if (p.key_type == GgmlType::F16)
    simd::f16_to_f32(reinterpret_cast<const uint16_t*>(key_of(p, j)), out, p.head_dim, dq);
  else
    dq(key_of(p, j), out, p.head_dim);
}

// Σ_h w[h] max(heads[h], 0) over nv 16-lane groups: lane l of the 16 accumulates the heads
// l, l + 16, ... as one chain of fused multiply-adds, then the 16 lanes are summed in hsum16's
// fixed order. On AVX2 the two 8-lane halves are kept in two registers (a 16-lane vector would
// live in memory there); the chains and the final order are the same, so are the bits.
float weighted_relu_sum(const float* w, const float* heads, int64_t nv) {
#if defined(MLA_SIMD16_YMM)
  simd::f32xn lo{}, hi{};
  for (int64_t v = 0; v < nv; ++v) {
    lo = simd::fma_n(simd::load_n(w + v * 16), simd::max_n(simd::load_n(heads + v * 16), simd::f32xn{}), lo);
    hi = simd::fma_n(simd::load_n(w + v * 16 + 8), simd::max_n(simd::load_n(heads + v * 16 + 8), simd::f32xn{}), hi);
  }
  f32x16 acc;
  std::memcpy(&acc, &lo, sizeof lo);
  std::memcpy(reinterpret_cast<char*>(&acc) + sizeof lo, &hi, sizeof hi);
#else
  f32x16 acc{};
  for (int64_t v = 0; v < nv; ++v)
    acc = simd::fma16(simd::load16(w + v * 16), simd::max16(simd::load16(heads + v * 16), f32x16{}), acc);
#endif
  return simd::hsum16(acc);
}

// Scores of query i (transposed q at q_t, [head_dim][hp]) against visible rows [j0, j1).
void score_rows(const IndexerParams& p, const Shape& sh, DequantizeFn dq, int64_t i, const float* q_t, int64_t j0,
                int64_t j1, float* work, float* out) {
  float* tile = work;                    // [kChunk][ld]
  float* heads = tile + kChunk * sh.ld;  // [kChunk][hp]
  float* w = heads + kChunk * sh.hp;     // [hp]: head weights, zero past n_head
  std::fill(w, w + sh.hp, 0.0f);
  std::copy(p.w + i * p.w_stride, p.w + i * p.w_stride + p.n_head, w);
  const int64_t nv = sh.hp / 16;
  for (int64_t c0 = j0; c0 < j1; c0 += kChunk) {
    const int64_t n = std::min(kChunk, j1 - c0);
    for (int64_t r = 0; r < n; ++r) load_key(p, dq, c0 + r, tile + r * sh.ld);
    simd::dot_rows(tile, sh.ld, n, q_t, sh.hp, nv, p.head_dim, heads, sh.hp);
    for (int64_t r = 0; r < n; ++r) out[c0 + r] = weighted_relu_sum(w, heads + r * sh.hp, nv);
  }
}

template <class T>
T* grown(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

}  // namespace

int32_t top_k_rows(const float* scores, int64_t n, int64_t top_k, int32_t* order, int32_t* sel) {
  if (n <= top_k) {
    for (int64_t j = 0; j < n; ++j) sel[j] = static_cast<int32_t>(j);
    return static_cast<int32_t>(n);
  }
  for (int64_t j = 0; j < n; ++j) order[j] = static_cast<int32_t>(j);
  auto better = [&](int32_t a, int32_t b) { return scores[a] > scores[b] || (scores[a] == scores[b] && a < b); };
  std::nth_element(order, order + top_k, order + n, better);
  std::copy(order, order + top_k, sel);
  std::sort(sel, sel + top_k);
  return static_cast<int32_t>(top_k);
}

void indexer_select(const IndexerParams& p, ThreadPool& pool, IndexerScratch& s) {
  const int nt = pool.n_threads();
  const Shape sh(p);
  const DequantizeFn dq = p.key_type == GgmlType::F32 ? nullptr : dequantize_fn(p.key_type);
  if (static_cast<int>(s.scores.size()) < nt) {
    s.scores.resize(nt);
    s.order.resize(nt);
    s.work.resize(nt);
  }
  for (int t = 0; t < nt; ++t) {
    grown(s.scores[t], static_cast<size_t>(p.n_ctx));
    grown(s.order[t], static_cast<size_t>(p.n_ctx));
    grown(s.work[t], sh.work_floats());
  }
  // q of every query transposed to [dim][head] (lanes past n_head zero).
  const size_t qt_floats = static_cast<size_t>(p.head_dim * sh.hp);
  s.q_t.assign(qt_floats * p.n_q, 0.0f);
  for (int64_t i = 0; i < p.n_q; ++i)
    for (int64_t h = 0; h < p.n_head; ++h)
      for (int64_t d = 0; d < p.head_dim; ++d)
        s.q_t[i * qt_floats + d * sh.hp + h] = p.q[i * p.q_stride + h * p.head_dim + d];
  auto q_t = [&](int64_t i) { return s.q_t.data() + i * qt_floats; };
  auto visible = [&](int64_t i) { return p.n_ctx - p.n_q + i + 1; };
  auto select = [&](int64_t i, const float* scores, int32_t* order) {
    p.sel_count[i] = top_k_rows(scores, visible(i), p.top_k, order, p.sel + i * p.sel_stride);
  };
  if (p.n_q >= nt) {
    // Prefill: whole queries per thread.
    pool.parallel_for(p.n_q, [&](int64_t i0, int64_t i1, int t) {
      for (int64_t i = i0; i < i1; ++i) {
        if (visible(i) > p.top_k) score_rows(p, sh, dq, i, q_t(i), 0, visible(i), s.work[t].data(), s.scores[t].data());
        select(i, s.scores[t].data(), s.order[t].data());
      }
    });
    return;
  }
  // Decode: the rows of one query split across threads (chunk-aligned), then one selection.
  for (int64_t i = 0; i < p.n_q; ++i) {
    const int64_t n = visible(i);
    if (n > p.top_k) {
      float* scores = s.scores[0].data();
      pool.parallel_for((n + kChunk - 1) / kChunk, [&](int64_t c0, int64_t c1, int t) {
        score_rows(p, sh, dq, i, q_t(i), c0 * kChunk, std::min(n, c1 * kChunk), s.work[t].data(), scores);
      });
    }
    select(i, s.scores[0].data(), s.order[0].data());
  }
}

void indexer_scores_ref(const IndexerParams& p, int64_t i, std::vector<double>& scores) {
  const int64_t n = p.n_ctx - p.n_q + i + 1;
  scores.assign(n, 0.0);
  std::vector<float> k(p.head_dim);
  for (int64_t j = 0; j < n; ++j) {
    dequantize_row(p.key_type, key_of(p, j), k.data(), p.head_dim);
    for (int64_t h = 0; h < p.n_head; ++h) {
      const double d = dot_f64(p.q + i * p.q_stride + h * p.head_dim, k.data(), p.head_dim);
      scores[j] += static_cast<double>(p.w[i * p.w_stride + h]) * std::max(d, 0.0);
    }
  }
}

}  // namespace mla
