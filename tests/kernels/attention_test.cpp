// MLA attention: each path against its scalar reference, the two paths against each other
// (they are exactly equal in real arithmetic), and invariance: a query's output bits do not
// depend on the thread count or on how many other queries share the call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/attention.h"

namespace mla {
namespace {

struct Case {
  int64_t n_head = 3, qk_nope = 16, qk_rope = 8, kv_lora = 32, v_dim = 12;
  int64_t n_ctx = 19, n_q = 5, n_slots = 40;
  std::vector<float> q, cache, w_uk, w_uk_t, w_uv, out;
  std::vector<int32_t> slots;

  explicit Case(uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0, 1);
    auto fill = [&](std::vector<float>& v, size_t n, float s) {
      v.resize(n);
      for (auto& x : v) x = d(rng) * s;
    };
    const int64_t qk = qk_nope + qk_rope;
    fill(q, n_q * n_head * qk, 1);
    fill(cache, n_slots * (kv_lora + qk_rope), 1);
    fill(w_uk_t, n_head * qk_nope * kv_lora, 1 / std::sqrt(float(kv_lora)));
    fill(w_uv, n_head * v_dim * kv_lora, 1 / std::sqrt(float(kv_lora)));
    w_uk.resize(w_uk_t.size());
    for (int64_t h = 0; h < n_head; ++h)
      for (int64_t n = 0; n < qk_nope; ++n)
        for (int64_t r = 0; r < kv_lora; ++r)
          w_uk[(h * kv_lora + r) * qk_nope + n] = w_uk_t[(h * qk_nope + n) * kv_lora + r];
    // Context rows scattered over the arena, as a paged cache would place them.
    std::vector<int32_t> all(n_slots);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    slots.assign(all.begin(), all.begin() + n_ctx);
    out.assign(n_q * n_head * v_dim, 0);
  }

  MlaAttnParams params() {
    MlaAttnParams p;
    p.n_head = n_head;
    p.qk_nope = qk_nope;
    p.qk_rope = qk_rope;
    p.kv_lora = kv_lora;
    p.v_dim = v_dim;
    p.kq_scale = 1.3f / std::sqrt(float(qk_nope + qk_rope));
    p.n_q = n_q;
    p.q = q.data();
    p.q_stride = n_head * (qk_nope + qk_rope);
    p.n_ctx = n_ctx;
    p.cache = cache.data();
    p.cache_stride = kv_lora + qk_rope;
    p.slots = slots.data();
    p.w_uk = w_uk.data();
    p.w_uk_t = w_uk_t.data();
    p.w_uv = w_uv.data();
    p.out = out.data();
    p.out_stride = n_head * v_dim;
    return p;
  }
};

double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, mag = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, double(std::fabs(a[i] - b[i])));
    mag = std::max(mag, double(std::fabs(b[i])));
  }
  return diff / mag;
}

TEST(MlaAttention, PathsMatchReferencesAndEachOther) {
  Case c(1);
  ThreadPool pool(2);
  AttnScratch scratch;
  auto p = c.params();
  mla_attention_mha_ref(p);
  auto mha_ref = c.out;
  mla_attention_mqa_ref(p);
  auto mqa_ref = c.out;
  mla_attention_mha(p, pool, scratch);
  auto mha = c.out;
  mla_attention_mqa(p, pool, scratch);
  auto mqa = c.out;
  EXPECT_LT(max_rel(mha, mha_ref), 1e-5);
  EXPECT_LT(max_rel(mqa, mqa_ref), 1e-5);
  EXPECT_LT(max_rel(mha_ref, mqa_ref), 1e-9);  // double references: the paths are the same math
  EXPECT_LT(max_rel(mha, mqa), 1e-5);
}

TEST(MlaAttention, SingleKeyGivesItsValue) {
  // One context row: softmax weight 1, the output is W_UV · c_kv whatever the query.
  Case c(2);
  c.n_ctx = 1;
  c.n_q = 1;
  auto p = c.params();
  ThreadPool pool(1);
  AttnScratch scratch;
  for (int path = 0; path < 2; ++path) {
    path ? mla_attention_mqa(p, pool, scratch) : mla_attention_mha(p, pool, scratch);
    const float* row = c.cache.data() + c.slots[0] * p.cache_stride;
    for (int64_t h = 0; h < c.n_head; ++h)
      for (int64_t e = 0; e < c.v_dim; ++e) {
        double want = 0;
        for (int64_t r = 0; r < c.kv_lora; ++r) want += double(c.w_uv[(h * c.v_dim + e) * c.kv_lora + r]) * row[r];
        EXPECT_NEAR(c.out[h * c.v_dim + e], want, 1e-5);
      }
  }
}

TEST(MlaAttention, QueryOutputIsIndependentOfThreadsAndBatch) {
  for (int path = 0; path < 2; ++path) {
    Case c(3);
    auto run = [&](MlaAttnParams p, int threads) {
      ThreadPool pool(threads);
      AttnScratch scratch;
      path ? mla_attention_mqa(p, pool, scratch) : mla_attention_mha(p, pool, scratch);
    };
    auto p = c.params();
    run(p, 3);
    const auto all = c.out;
    run(p, 1);
    EXPECT_EQ(all, c.out) << "thread count changed the bits, path " << path;
    // Query i alone, with the context it can see, gives the same bits as within the batch.
    const int64_t width = c.n_head * c.v_dim;
    for (int64_t i = 0; i < c.n_q; ++i) {
      auto pi = c.params();
      pi.n_q = 1;
      pi.q = c.q.data() + i * pi.q_stride;
      pi.n_ctx = c.n_ctx - c.n_q + i + 1;
      std::vector<float> one(width);
      pi.out = one.data();
      run(pi, 2);
      EXPECT_EQ(0, std::memcmp(one.data(), all.data() + i * width, sizeof(float) * width)) << "query " << i;
    }
  }
}

}  // namespace
}  // namespace mla
