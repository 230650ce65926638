#include "kernels/indexer.h"

#include <algorithm>

#include "kernels/vec.h"

namespace mla {
namespace {

constexpr int64_t kChunk = 64;  // context rows per dot block

// Scores of query i against visible rows [j0, j1): heads' dots in one tile, then Σ_h w_h ReLU(·).
void score_rows(const IndexerParams& p, int64_t i, int64_t j0, int64_t j1, float* heads, float* out) {
  const float* qi = p.q + i * p.q_stride;
  const float* wi = p.w + i * p.w_stride;
  for (int64_t c0 = j0; c0 < j1; c0 += kChunk) {
    const int64_t n = std::min(kChunk, j1 - c0);
    dot_block_f32(
        p.n_head, n, p.head_dim, [&](int64_t h) { return qi + h * p.head_dim; },
        [&](int64_t j) { return p.keys + p.slots[c0 + j] * p.key_stride; }, heads, kChunk);
    for (int64_t j = 0; j < n; ++j) {
      float s = 0;
      for (int64_t h = 0; h < p.n_head; ++h) s += wi[h] * std::max(heads[h * kChunk + j], 0.0f);
      out[c0 + j] = s;
    }
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
  if (static_cast<int>(s.scores.size()) < nt) {
    s.scores.resize(nt);
    s.order.resize(nt);
  }
  grown(s.heads, static_cast<size_t>(nt * p.n_head * kChunk));
  for (int t = 0; t < nt; ++t) {
    grown(s.scores[t], static_cast<size_t>(p.n_ctx));
    grown(s.order[t], static_cast<size_t>(p.n_ctx));
  }
  auto visible = [&](int64_t i) { return p.n_ctx - p.n_q + i + 1; };
  auto select = [&](int64_t i, const float* scores, int32_t* order) {
    p.sel_count[i] = top_k_rows(scores, visible(i), p.top_k, order, p.sel + i * p.sel_stride);
  };
  if (p.n_q >= nt) {
    // Prefill: whole queries per thread.
    pool.parallel_for(p.n_q, [&](int64_t i0, int64_t i1, int t) {
      float* heads = s.heads.data() + t * p.n_head * kChunk;
      for (int64_t i = i0; i < i1; ++i) {
        if (visible(i) > p.top_k) score_rows(p, i, 0, visible(i), heads, s.scores[t].data());
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
        score_rows(p, i, c0 * kChunk, std::min(n, c1 * kChunk), s.heads.data() + t * p.n_head * kChunk, scores);
      });
    }
    select(i, s.scores[0].data(), s.order[0].data());
  }
}

void indexer_scores_ref(const IndexerParams& p, int64_t i, std::vector<double>& scores) {
  const int64_t n = p.n_ctx - p.n_q + i + 1;
  scores.assign(n, 0.0);
  for (int64_t j = 0; j < n; ++j) {
    const float* k = p.keys + p.slots[j] * p.key_stride;
    for (int64_t h = 0; h < p.n_head; ++h) {
      const double d = dot_f64(p.q + i * p.q_stride + h * p.head_dim, k, p.head_dim);
      scores[j] += static_cast<double>(p.w[i * p.w_stride + h]) * std::max(d, 0.0);
    }
  }
}

}  // namespace mla
