// The DSA lightning indexer's selection against a double-precision reference and a brute-force
// top-k, and the MLA kernels' sparse mode against their references and against dense attention.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "../support/random.h"
#include "kernels/attention.h"
#include "kernels/indexer.h"
#include "kernels/ops.h"
#include "kernels/rope.h"
#include "quant/quant.h"

namespace mla {
namespace {

struct IndexerCase {
  int64_t H = 4, D = 32, n_q = 5, n_ctx = 40, top_k = 8;
  std::vector<float> q, w, keys;
  std::vector<int32_t> slots, sel, count;
  IndexerParams params() {
    q = randn(n_q * H * D, 1);
    w = randn(n_q * H, 2, 0.3f);
    keys = randn((n_ctx + 7) * D, 3);
    slots.resize(n_ctx);
    for (int64_t j = 0; j < n_ctx; ++j) slots[j] = static_cast<int32_t>((j * 5 + 3) % (n_ctx + 7));  // scattered
    sel.assign(n_q * top_k, -1);
    count.assign(n_q, -1);
    IndexerParams p;
    p.n_head = H, p.head_dim = D, p.top_k = top_k, p.n_q = n_q;
    p.q = q.data(), p.q_stride = H * D, p.w = w.data(), p.w_stride = H;
    p.n_ctx = n_ctx, p.keys = keys.data(), p.key_row_bytes = D * sizeof(float), p.slots = slots.data();
    p.sel = sel.data(), p.sel_stride = top_k, p.sel_count = count.data();
    return p;
  }
};

void expect_selection_is_top_k(const IndexerParams& p) {
  for (int64_t i = 0; i < p.n_q; ++i) {
    std::vector<double> ref;
    indexer_scores_ref(p, i, ref);
    const int64_t n_vis = p.n_ctx - p.n_q + i + 1;
    ASSERT_EQ(static_cast<int64_t>(ref.size()), n_vis);
    std::vector<int32_t> order(n_vis);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return ref[a] > ref[b]; });
    const int64_t k = std::min(p.top_k, n_vis);
    ASSERT_EQ(p.sel_count[i], k) << "query " << i;
    std::vector<int32_t> want(order.begin(), order.begin() + k);
    std::sort(want.begin(), want.end());
    std::vector<int32_t> got(p.sel + i * p.sel_stride, p.sel + i * p.sel_stride + k);
    EXPECT_EQ(got, want) << "query " << i;
  }
}

TEST(Indexer, SelectsTheTopKOfTheReferenceScores) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    IndexerScratch scratch;
    for (int64_t n_q : {1, 5, 40}) {
      IndexerCase c;
      c.n_q = n_q;
      IndexerParams p = c.params();
      indexer_select(p, pool, scratch);
      expect_selection_is_top_k(p);
    }
  }
}

TEST(Indexer, ShortContextSelectsEverything) {
  ThreadPool pool(2);
  IndexerScratch scratch;
  IndexerCase c;
  c.n_ctx = 6, c.n_q = 6, c.top_k = 8;
  IndexerParams p = c.params();
  indexer_select(p, pool, scratch);
  for (int64_t i = 0; i < p.n_q; ++i) {
    ASSERT_EQ(p.sel_count[i], i + 1);
    for (int64_t k = 0; k <= i; ++k) EXPECT_EQ(p.sel[i * p.sel_stride + k], k);
  }
}

TEST(Indexer, TopKBreaksTiesTowardsEarlierRows) {
  const float scores[] = {1, 3, 3, 0, 3, 2};
  int32_t order[6], sel[3];
  ASSERT_EQ(top_k_rows(scores, 6, 3, order, sel), 3);
  EXPECT_EQ(std::vector<int32_t>(sel, sel + 3), (std::vector<int32_t>{1, 2, 4}));
  ASSERT_EQ(top_k_rows(scores, 6, 2, order, sel), 2);
  EXPECT_EQ(std::vector<int32_t>(sel, sel + 2), (std::vector<int32_t>{1, 2}));
}

TEST(Indexer, SelectionDoesNotDependOnThreads) {
  IndexerCase a, b;
  a.n_q = b.n_q = 3;
  a.n_ctx = b.n_ctx = 300;
  IndexerParams pa = a.params(), pb = b.params();
  ThreadPool one(1), three(3);
  IndexerScratch s1, s3;
  indexer_select(pa, one, s1);
  indexer_select(pb, three, s3);
  EXPECT_EQ(a.sel, b.sel);
  EXPECT_EQ(a.count, b.count);
}

TEST(Indexer, KeysReadInTheirStoredDtype) {
  // Keys kept as F16 / BF16 (as the cache stores them) are scored in place; the reference reads
  // the same stored keys. 20 heads: not a multiple of the 16-lane vectors.
  for (GgmlType type : {GgmlType::F16, GgmlType::BF16}) {
    for (int threads : {1, 2}) {
      ThreadPool pool(threads);
      IndexerScratch scratch;
      for (int64_t n_q : {1, 7}) {
        IndexerCase c;
        c.H = 20, c.n_ctx = 300, c.n_q = n_q;
        IndexerParams p = c.params();
        const int64_t rb = ggml_row_bytes(type, c.D);
        std::vector<uint8_t> stored((c.n_ctx + 7) * rb);
        for (int64_t r = 0; r < c.n_ctx + 7; ++r)
          quantize_row(type, c.keys.data() + r * c.D, stored.data() + r * rb, c.D);
        p.keys = stored.data(), p.key_type = type, p.key_row_bytes = rb;
        indexer_select(p, pool, scratch);
        expect_selection_is_top_k(p);
      }
    }
  }
}

TEST(Ops, LayerNormMatchesReference) {
  auto x = randn(128, 4, 3.0f), w = randn(128, 5), b = randn(128, 6);
  std::vector<float> y(128), y_ref(128);
  layernorm(x.data(), w.data(), b.data(), y.data(), 128, 1e-6f);
  layernorm_ref(x.data(), w.data(), b.data(), y_ref.data(), 128, 1e-6f);
  for (int i = 0; i < 128; ++i) EXPECT_NEAR(y[i], y_ref[i], 1e-5f * (1 + std::fabs(y_ref[i])));
}

TEST(Rope, NeoxRotatesHalvesWithTheSameAngles) {
  RopeParams rp;
  rp.n_dims = 16;
  std::vector<float> cs(8), sn(8);
  rope_cos_sin(rp, 37, cs.data(), sn.data());
  auto x = randn(24, 7);
  // NEOX on x equals NORM on x with each (i, i + 8) pair moved next to each other.
  std::vector<float> neox = x, interleaved(24);
  for (int i = 0; i < 8; ++i) interleaved[2 * i] = x[i], interleaved[2 * i + 1] = x[i + 8];
  for (int i = 16; i < 24; ++i) interleaved[i] = x[i];
  rope_apply_neox(neox.data(), 1, 0, 16, cs.data(), sn.data());
  rope_apply(interleaved.data(), 1, 0, 16, cs.data(), sn.data());
  for (int i = 0; i < 8; ++i) {
    EXPECT_FLOAT_EQ(neox[i], interleaved[2 * i]);
    EXPECT_FLOAT_EQ(neox[i + 8], interleaved[2 * i + 1]);
  }
  for (int i = 16; i < 24; ++i) EXPECT_EQ(neox[i], x[i]);  // the un-rotated tail is untouched
}

// Sparse MLA attention: both kernels match their references on a scattered selection, and a
// selection of every visible row gives the dense result bit for bit.
struct SparseAttnCase {
  int64_t H = 3, N = 16, Rr = 8, Rk = 32, V = 16, n_q = 4, n_ctx = 24;
  std::vector<float> q, cache, w_uk, w_uk_t, w_uv, out;
  std::vector<int32_t> slots, sel, count;
  MlaAttnParams params() {
    q = randn(n_q * H * (N + Rr), 11);
    cache = randn(n_ctx * (Rk + Rr), 12);
    w_uk = randn(H * Rk * N, 13, 0.2f);
    w_uk_t.resize(w_uk.size());
    for (int64_t h = 0; h < H; ++h)
      for (int64_t r = 0; r < Rk; ++r)
        for (int64_t n = 0; n < N; ++n) w_uk_t[(h * N + n) * Rk + r] = w_uk[(h * Rk + r) * N + n];
    w_uv = randn(H * V * Rk, 14, 0.2f);
    out.assign(n_q * H * V, 0.0f);
    slots.resize(n_ctx);
    std::iota(slots.begin(), slots.end(), 0);
    MlaAttnParams p;
    p.n_head = H, p.qk_nope = N, p.qk_rope = Rr, p.kv_lora = Rk, p.v_dim = V, p.kq_scale = 0.2f;
    p.n_q = n_q, p.q = q.data(), p.q_stride = H * (N + Rr);
    p.n_ctx = n_ctx, p.cache = cache.data(), p.cache_row_bytes = static_cast<int64_t>(sizeof(float)) * (Rk + Rr),
    p.slots = slots.data();
    p.w_uk = w_uk.data(), p.w_uk_t = w_uk_t.data(), p.w_uv = w_uv.data();
    p.out = out.data(), p.out_stride = H * V;
    return p;
  }
  void select(MlaAttnParams& p, bool all) {
    const int64_t stride = n_ctx;
    sel.assign(n_q * stride, 0);
    count.assign(n_q, 0);
    for (int64_t i = 0; i < n_q; ++i) {
      const int64_t n_vis = n_ctx - n_q + i + 1;
      for (int64_t j = 0; j < n_vis; ++j)
        if (all || (j * 7 + i) % 3 == 0) sel[i * stride + count[i]++] = static_cast<int32_t>(j);
    }
    p.sel = sel.data(), p.sel_count = count.data(), p.sel_stride = stride;
  }
};

TEST(SparseAttention, KernelsMatchReferences) {
  ThreadPool pool(2);
  AttnScratch scratch;
  for (bool mqa : {false, true}) {
    SparseAttnCase c;
    MlaAttnParams p = c.params();
    c.select(p, false);
    std::vector<float> ref(c.out.size());
    MlaAttnParams pr = p;
    pr.out = ref.data();
    if (mqa) {
      mla_attention_mqa(p, pool, scratch);
      mla_attention_mqa_ref(pr);
    } else {
      mla_attention_mha(p, pool, scratch);
      mla_attention_mha_ref(pr);
    }
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(c.out[i], ref[i], 1e-5f) << (mqa ? "mqa" : "mha") << " " << i;
    // The selection matters: dense attention gives something else.
    std::vector<float> dense(c.out.size());
    pr.sel = nullptr;
    pr.out = dense.data();
    mqa ? mla_attention_mqa_ref(pr) : mla_attention_mha_ref(pr);
    double diff = 0;
    for (size_t i = 0; i < ref.size(); ++i) diff = std::max(diff, static_cast<double>(std::fabs(dense[i] - ref[i])));
    EXPECT_GT(diff, 1e-3);
  }
}

// Both kernels treat a selection of every visible row as dense attention: bit for bit.
TEST(SparseAttention, FullSelectionIsDense) {
  ThreadPool pool(2);
  AttnScratch scratch;
  for (bool mqa : {false, true}) {
    SparseAttnCase c;
    MlaAttnParams p = c.params();
    std::vector<float> dense(c.out.size());
    MlaAttnParams pd = p;
    pd.out = dense.data();
    c.select(p, true);
    mqa ? mla_attention_mqa(p, pool, scratch) : mla_attention_mha(p, pool, scratch);
    mqa ? mla_attention_mqa(pd, pool, scratch) : mla_attention_mha(pd, pool, scratch);
    EXPECT_EQ(c.out, dense) << (mqa ? "mqa" : "mha");
  }
}

}  // namespace
}  // namespace mla
