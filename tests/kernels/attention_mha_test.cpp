// The tiled MHA kernel (src/kernels/attention_mha.cpp) against its scalar reference, and its
// promise: a query's output bits depend only on its own rows (its position and the cache), never
// on how the prompt was chunked, how many queries share the call, or the thread count. Every case
// runs over each cache dtype, with F32 and Q8_0 projections, dense and with a DSA selection.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "quant/quant.h"

namespace mla {
namespace {

constexpr GgmlType kCacheTypes[] = {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0};

// One prompt of n_tok tokens whose latent rows sit scattered in a cache arena. Widths are not
// multiples of the kernel's tiles (v_dim 20, qk_nope 16 + qk_rope 32).
struct Prompt {
  int64_t n_head = 3, qk_nope = 16, qk_rope = 32, kv_lora = 32, v_dim = 20;
  int64_t n_tok;
  std::vector<float> q, rows, w_uk_t, w_uv;
  std::vector<uint8_t> cache, w_uk_t_q8, w_uv_q8;
  std::vector<int32_t> slots;
  GgmlType type = GgmlType::F32;
  int64_t row_bytes = 0;

  Prompt(int64_t n, uint32_t seed) : n_tok(n) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0, 1);
    auto fill = [&](std::vector<float>& v, int64_t count, float s) {
      v.resize(count);
      for (auto& x : v) x = d(rng) * s;
    };
    const int64_t n_slots = n_tok + 17;
    fill(q, n_tok * n_head * (qk_nope + qk_rope), 1);
    fill(rows, n_slots * (kv_lora + qk_rope), 1);
    fill(w_uk_t, n_head * qk_nope * kv_lora, 1 / std::sqrt(float(kv_lora)));
    fill(w_uv, n_head * v_dim * kv_lora, 1 / std::sqrt(float(kv_lora)));
    w_uk_t_q8 = q8_rows(w_uk_t, kv_lora);
    w_uv_q8 = q8_rows(w_uv, kv_lora);
    std::vector<int32_t> all(n_slots);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    slots.assign(all.begin(), all.begin() + n_tok);
    store(GgmlType::F32);
  }
  static std::vector<uint8_t> q8_rows(const std::vector<float>& x, int64_t cols) {
    const int64_t rb = ggml_row_bytes(GgmlType::Q8_0, cols), n = static_cast<int64_t>(x.size()) / cols;
    std::vector<uint8_t> out(n * rb);
    for (int64_t r = 0; r < n; ++r) quantize_row(GgmlType::Q8_0, x.data() + r * cols, out.data() + r * rb, cols);
    return out;
  }
  void store(GgmlType t) {
    type = t;
    const int64_t row_len = kv_lora + qk_rope, n = static_cast<int64_t>(rows.size()) / row_len;
    row_bytes = ggml_row_bytes(t, row_len);
    cache.resize(n * row_bytes);
    for (int64_t s = 0; s < n; ++s) quantize_row(t, rows.data() + s * row_len, cache.data() + s * row_bytes, row_len);
  }

  // The DSA selection of the token at position i: a function of i and the row alone.
  static bool selected(int64_t i, int64_t j) { return j == i || (j * 7 + i * 3) % 5 < 2; }

  // Queries [a, b) of the prompt over context rows [0, b): one prefill chunk.
  struct Call {
    MlaAttnParams p;
    std::vector<int32_t> sel, count;
    std::vector<float> out;
  };
  Call call(int64_t a, int64_t b, bool q8_proj, bool sparse) {
    Call c;
    MlaAttnParams& p = c.p;
    p.n_head = n_head, p.qk_nope = qk_nope, p.qk_rope = qk_rope, p.kv_lora = kv_lora, p.v_dim = v_dim;
    p.kq_scale = 1.3f / std::sqrt(float(qk_nope + qk_rope));
    p.q_stride = n_head * (qk_nope + qk_rope);
    p.n_q = b - a, p.q = q.data() + a * p.q_stride;
    p.n_ctx = b, p.cache = cache.data(), p.cache_type = type, p.cache_row_bytes = row_bytes, p.slots = slots.data();
    p.w_uk_t = w_uk_t.data(), p.w_uv = w_uv.data();
    if (q8_proj) {
      const int64_t rb = ggml_row_bytes(GgmlType::Q8_0, kv_lora);
      p.w_uk_t = MlaProj(w_uk_t_q8.data(), GgmlType::Q8_0, rb, 0);
      p.w_uv = MlaProj(w_uv_q8.data(), GgmlType::Q8_0, rb, 0);
    }
    c.out.assign(p.n_q * n_head * v_dim, 0.0f);
    p.out_stride = n_head * v_dim;
    if (sparse) {
      c.sel.assign(p.n_q * b, 0);
      c.count.assign(p.n_q, 0);
      for (int64_t i = a; i < b; ++i)
        for (int64_t j = 0; j <= i; ++j)
          if (selected(i, j)) c.sel[(i - a) * b + c.count[i - a]++] = static_cast<int32_t>(j);
      p.sel = c.sel.data(), p.sel_count = c.count.data(), p.sel_stride = b;
    }
    p.out = c.out.data();
    return c;
  }

  // Outputs of every query, the prompt run in chunks of chunk tokens.
  std::vector<float> run(int64_t chunk, bool q8_proj, bool sparse, int threads) {
    ThreadPool pool(threads);
    AttnScratch scratch;
    std::vector<float> all;
    for (int64_t a = 0; a < n_tok; a += chunk) {
      Call c = call(a, std::min(n_tok, a + chunk), q8_proj, sparse);
      mla_attention_mha(c.p, pool, scratch);
      all.insert(all.end(), c.out.begin(), c.out.end());
    }
    return all;
  }
};

std::string label(GgmlType t, bool q8_proj, bool sparse) {
  return std::string(ggml_type_name(t)) + (q8_proj ? " q8_0 proj" : " f32 proj") + (sparse ? " sel" : " dense");
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0;
}

TEST(MhaAttention, ChunkedPromptGivesTheBitsOfTheWholePrompt) {
  Prompt pr(150, 7);  // blocks of 64 rows: two full, one partial
  for (GgmlType t : kCacheTypes) {
    pr.store(t);
    for (bool q8 : {false, true})
      for (bool sparse : {false, true}) {
        const auto whole = pr.run(pr.n_tok, q8, sparse, 2);
        for (int64_t chunk : {1, 5, 16, 17, 63, 64, 100})
          EXPECT_TRUE(same_bits(whole, pr.run(chunk, q8, sparse, 2)))
              << label(t, q8, sparse) << ", chunks of " << chunk;
      }
  }
}

// More queries than one pass holds (1,024), so the heads' work is split into query groups, and
// more threads than heads, so groups split heads across threads.
TEST(MhaAttention, ThreadsAndQueryGroupsDoNotChangeTheBits) {
  Prompt pr(1100, 8);
  pr.store(GgmlType::F16);
  for (bool sparse : {false, true}) {
    const auto one = pr.run(pr.n_tok, false, sparse, 1);
    for (int threads : {2, 3, 4}) EXPECT_TRUE(same_bits(one, pr.run(pr.n_tok, false, sparse, threads))) << threads;
    EXPECT_TRUE(same_bits(one, pr.run(512, false, sparse, 2))) << "chunks of 512";
  }
}

// |kernel - reference| <= tol · max |reference|, tol from F32 rounding: every value passes through
// chains of n roundings, each at most u = 2^-24 relative to the magnitude of its terms (the usual
// γ_n ≈ n·u): the decompression dots (kv_lora terms) and score dots (qk_head terms), whose absolute
// error in a score becomes that relative error in its weight (so it is scaled by the largest
// |score| the data produce); the weight and output sums within a block (64 rows) and a rescale per
// block; the exponential (relative error ≈ 2e-7, 4u) and the final division.
double tolerance(const MlaAttnParams& p, double max_score) {
  const double u = std::ldexp(1.0, -24);
  const double n_blocks = std::ceil(p.n_ctx / 64.0);
  return u * ((p.kv_lora + p.qk_nope + p.qk_rope) * (1 + max_score) + 64 + 2 * n_blocks + 4 + 1);
}

// The largest |kq_scale · q·k| over the rows each query attends to, in double.
double max_score(const MlaAttnParams& p) {
  const int64_t qk = p.qk_nope + p.qk_rope, row_len = p.kv_lora + p.qk_rope;
  std::vector<float> uk(p.qk_nope * p.kv_lora), row(row_len);
  double mx = 0;
  for (int64_t h = 0; h < p.n_head; ++h) {
    const float* w = mla_proj_head(p.w_uk_t, h, p.qk_nope, p.kv_lora, uk.data());
    for (int64_t j = 0; j < p.n_ctx; ++j) {
      dequantize_row(p.cache_type, static_cast<const uint8_t*>(p.cache) + p.slots[j] * p.cache_row_bytes, row.data(),
                     row_len);
      std::vector<double> k(qk);
      for (int64_t d = 0; d < p.qk_nope; ++d)
        for (int64_t c = 0; c < p.kv_lora; ++c) k[d] += double(w[d * p.kv_lora + c]) * row[c];
      for (int64_t d = 0; d < p.qk_rope; ++d) k[p.qk_nope + d] = row[p.kv_lora + d];
      for (int64_t i = std::max<int64_t>(0, j - (p.n_ctx - p.n_q)); i < p.n_q; ++i) {
        const float* q = p.q + i * p.q_stride + h * qk;
        double s = 0;
        for (int64_t d = 0; d < qk; ++d) s += q[d] * k[d];
        mx = std::max(mx, std::fabs(s * p.kq_scale));
      }
    }
  }
  return mx;
}

TEST(MhaAttention, MatchesTheReferenceWithinF32Rounding) {
  Prompt pr(150, 9);
  ThreadPool pool(2);
  AttnScratch scratch;
  for (GgmlType t : kCacheTypes) {
    pr.store(t);
    for (bool q8 : {false, true})
      for (bool sparse : {false, true}) {
        // A chunk of 40 queries at depth 150, and the whole prompt.
        for (int64_t a : {110, 0}) {
          auto c = pr.call(a, pr.n_tok, q8, sparse);
          mla_attention_mha(c.p, pool, scratch);
          const auto got = c.out;
          mla_attention_mha_ref(c.p);
          double diff = 0, mag = 0;
          for (size_t k = 0; k < got.size(); ++k) {
            diff = std::max(diff, double(std::fabs(got[k] - c.out[k])));
            mag = std::max(mag, double(std::fabs(c.out[k])));
          }
          const double tol = tolerance(c.p, max_score(c.p));
          EXPECT_LE(diff / mag, tol) << label(t, q8, sparse) << ", queries from " << a;
        }
      }
  }
}

// A long context: many blocks per query, blocks a 16-query tile sees only in part, and a DSA
// selection whose blocks some queries skip entirely; against the reference and chunked.
TEST(MhaAttention, LongContextAgainstReferenceAndChunked) {
  Prompt pr(700, 10);
  pr.store(GgmlType::F16);
  ThreadPool pool(2);
  AttnScratch scratch;
  for (bool sparse : {false, true}) {
    auto c = pr.call(600, pr.n_tok, true, sparse);
    mla_attention_mha(c.p, pool, scratch);
    const auto got = c.out;
    mla_attention_mha_ref(c.p);
    double diff = 0, mag = 0;
    for (size_t k = 0; k < got.size(); ++k) {
      diff = std::max(diff, double(std::fabs(got[k] - c.out[k])));
      mag = std::max(mag, double(std::fabs(c.out[k])));
    }
    EXPECT_LE(diff / mag, tolerance(c.p, max_score(c.p))) << (sparse ? "sel" : "dense");
    const auto whole = pr.run(pr.n_tok, true, sparse, 2);
    const int64_t width = pr.n_head * pr.v_dim;
    EXPECT_EQ(0, std::memcmp(got.data(), whole.data() + 600 * width, sizeof(float) * got.size()))
        << (sparse ? "sel" : "dense") << ": the last 100 queries alone differ from the whole prompt";
  }
}

}  // namespace
}  // namespace mla
