// MLA attention: each path against its scalar reference, the two paths against each other
// (they are exactly equal in real arithmetic), and invariance: a query's output bits do not
// depend on the thread count or on how many other queries share the call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/simd16.h"
#include "quant/quant.h"

namespace mla {
namespace {

struct Case {
  int64_t n_head = 3, qk_nope = 16, qk_rope = 8, kv_lora = 32, v_dim = 12;
  int64_t n_ctx = 19, n_q = 5, n_slots = 40;
  std::vector<float> q, cache, w_uk, w_uk_t, w_uv, out;
  std::vector<int32_t> slots;

  explicit Case(uint32_t seed) { init(seed); }
  // The same with the dimensions of `dims`.
  Case(uint32_t seed, const Case& dims)
      : n_head(dims.n_head),
        qk_nope(dims.qk_nope),
        qk_rope(dims.qk_rope),
        kv_lora(dims.kv_lora),
        v_dim(dims.v_dim),
        n_ctx(dims.n_ctx),
        n_q(dims.n_q),
        n_slots(dims.n_slots) {
    init(seed);
  }
  void init(uint32_t seed) {
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
    p.cache_row_bytes = static_cast<int64_t>(sizeof(float)) * (kv_lora + qk_rope);
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

// Each step-th query of c, alone in a call of p with the context it can see, gives the bits it
// had in the whole batch's output `all` (run(params, threads) calls the kernel under test).
template <class Run>
void expect_queries_alone_give_their_batch_bits(const MlaAttnParams& p, const Case& c, const std::vector<float>& all,
                                                Run run, int64_t step = 1) {
  const int64_t width = c.n_head * c.v_dim;
  for (int64_t i = 0; i < c.n_q; i += step) {
    auto pi = p;
    pi.n_q = 1;
    pi.q = c.q.data() + i * pi.q_stride;
    pi.n_ctx = c.n_ctx - c.n_q + i + 1;
    std::vector<float> one(width);
    pi.out = one.data();
    run(pi, 2);
    EXPECT_EQ(0, std::memcmp(one.data(), all.data() + i * width, sizeof(float) * width)) << "query " << i;
  }
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
    const float* row = c.cache.data() + c.slots[0] * (c.kv_lora + c.qk_rope);
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
    expect_queries_alone_give_their_batch_bits(c.params(), c, all, run);
  }
}

// A long context in each cache dtype: more rows than one 256-row split and one 4096-row part, a
// head count that is not a multiple of the 16-lane vectors. Both paths against the references
// (which read the same stored rows), thread-count and batch invariance, and a DSA selection of
// every visible row giving the dense bits.
TEST(MlaAttention, StoredDtypesAcrossSplitsAndParts) {
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0}) {
    Case c(11);
    c.n_head = 20, c.qk_nope = 16, c.qk_rope = 32, c.kv_lora = 64, c.v_dim = 16;
    c.n_ctx = 4500, c.n_q = 3, c.n_slots = 4600;
    c = Case(11, c);
    const int64_t row_len = c.kv_lora + c.qk_rope;
    const int64_t row_bytes = ggml_row_bytes(type, row_len);
    std::vector<uint8_t> stored(c.n_slots * row_bytes);
    for (int64_t s = 0; s < c.n_slots; ++s)
      quantize_row(type, c.cache.data() + s * row_len, stored.data() + s * row_bytes, row_len);
    auto p = c.params();
    p.cache = stored.data();
    p.cache_type = type;
    p.cache_row_bytes = row_bytes;
    const std::string name(ggml_type_name(type));

    mla_attention_mqa_ref(p);
    const auto ref = c.out;
    ThreadPool pool3(3), pool1(1);
    AttnScratch s3, s1;
    mla_attention_mqa(p, pool3, s3);
    const auto mqa = c.out;
    EXPECT_LT(max_rel(mqa, ref), 2e-5) << name;
    mla_attention_mqa(p, pool1, s1);
    EXPECT_EQ(mqa, c.out) << name << ": thread count changed the bits";
    mla_attention_mha(p, pool3, s3);
    EXPECT_LT(max_rel(c.out, ref), 2e-5) << name;

    // The last query alone gives the bits it had in the batch.
    const int64_t width = c.n_head * c.v_dim;
    auto pi = p;
    pi.n_q = 1;
    pi.q = c.q.data() + (c.n_q - 1) * pi.q_stride;
    std::vector<float> one(width);
    pi.out = one.data();
    mla_attention_mqa(pi, pool3, s3);
    EXPECT_EQ(0, std::memcmp(one.data(), mqa.data() + (c.n_q - 1) * width, sizeof(float) * width)) << name;

    // A selection of every visible row is dense attention, bit for bit; a strided one matches
    // the reference over the same rows.
    for (int stride : {1, 3}) {
      std::vector<int32_t> sel(c.n_q * c.n_ctx), count(c.n_q);
      for (int64_t i = 0; i < c.n_q; ++i) {
        const int64_t n_vis = c.n_ctx - c.n_q + i + 1;
        int32_t n = 0;
        for (int64_t j = 0; j < n_vis; j += stride) sel[i * c.n_ctx + n++] = static_cast<int32_t>(j);
        count[i] = n;
      }
      auto ps = p;
      ps.sel = sel.data(), ps.sel_count = count.data(), ps.sel_stride = c.n_ctx;
      mla_attention_mqa(ps, pool3, s3);
      if (stride == 1) {
        EXPECT_EQ(mqa, c.out) << name << ": the whole selection differs from dense";
      } else {
        const auto sparse = c.out;
        mla_attention_mqa_ref(ps);
        EXPECT_LT(max_rel(sparse, c.out), 2e-5) << name;
      }
    }
  }
}

// The score and weighted-sum tiles (16-lane tiles, or 8-lane register tiles on AVX2 without
// AVX-512) give every output as one chain of fused multiply-adds in index order, the bits of a
// scalar std::fma chain, for every remainder of the row and head blocking.
TEST(MlaAttention, SimdTilesAreOneFmaChainPerOutput) {
#if defined(__FMA__) || defined(__AVX512F__)
  auto fma_ref = [](float a, float b, float c) { return std::fma(a, b, c); };
#else
  auto fma_ref = [](float a, float b, float c) { return a * b + c; };
#endif
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0, 1);
  auto fill = [&](std::vector<float>& v, size_t n) {
    v.resize(n);
    for (auto& x : v) x = d(rng);
  };
  const int64_t k = 37, lda = 41;
  for (int64_t n_vec = 1; n_vec <= 5; ++n_vec)
    for (int64_t m = 1; m <= 14; ++m) {
      const int64_t ld = 16 * n_vec + 16;  // strides wider than the columns used
      std::vector<float> a, bt, out(m * ld, -1.0f);
      fill(a, m * lda), fill(bt, k * ld);
      simd::dot_rows(a.data(), lda, m, bt.data(), ld, n_vec, k, out.data(), ld);
      for (int64_t j = 0; j < m; ++j)
        for (int64_t l = 0; l < 16 * n_vec; ++l) {
          float want = 0;
          for (int64_t c = 0; c < k; ++c) want = fma_ref(a[j * lda + c], bt[c * ld + l], want);
          ASSERT_EQ(want, out[j * ld + l]) << "dot_rows m " << m << " n_vec " << n_vec << " row " << j << " lane " << l;
        }
      // weighted_rows: m heads, n_vec 16-float column groups, k rows.
      std::vector<float> w, x, o(m * ld, -1.0f);
      fill(w, k * lda), fill(x, k * ld);
      simd::weighted_rows(w.data(), lda, m, x.data(), ld, n_vec, k, o.data(), ld);
      for (int64_t h = 0; h < m; ++h)
        for (int64_t c = 0; c < 16 * n_vec; ++c) {
          float want = 0;
          for (int64_t j = 0; j < k; ++j) want = fma_ref(w[j * lda + h], x[j * ld + c], want);
          ASSERT_EQ(want, o[h * ld + c]) << "weighted_rows heads " << m << " n_cvec " << n_vec << " head " << h;
        }
    }
}

// The kernels' F16 row conversion gives the quant library's reference bits for every F16 value
// (NaN payloads and signs included), in 16-value groups and in a tail.
TEST(MlaAttention, F16RowConversionIsTheReferenceForEveryValue) {
  std::vector<uint16_t> all(65536 + 7);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i * 40503u);  // odd: a permutation
  std::vector<float> want(all.size()), got(all.size());
  dequantize_row_ref(GgmlType::F16, all.data(), want.data(), static_cast<int64_t>(all.size()));
  simd::f16_to_f32(all.data(), got.data(), static_cast<int64_t>(all.size()), dequantize_fn(GgmlType::F16));
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * want.size()));
}

// Rows of w (cols wide) stored in `type` into q, and those rows dequantized to F32 into f (the
// copy a load-time conversion would make); returns the stored row bytes.
int64_t store_rows(GgmlType type, const std::vector<float>& w, int64_t cols, std::vector<uint8_t>& q,
                   std::vector<float>& f) {
  const int64_t rb = ggml_row_bytes(type, cols), rows = static_cast<int64_t>(w.size()) / cols;
  q.resize(rows * rb);
  f.resize(w.size());
  for (int64_t r = 0; r < rows; ++r) {
    quantize_row(type, w.data() + r * cols, q.data() + r * rb, cols);
    dequantize_row(type, q.data() + r * rb, f.data() + r * cols, cols);
  }
  return rb;
}

// W_UK / W_UV given as rows in a file type (read in place, converted a head at a time) give the
// bits of the same rows dequantized to F32 up front, on both paths and both references: in the
// split layout (heads back to back) and the fused one (attn_kv_b: a head's K rows, then its V
// rows, so both views step N + V rows per head), and from a head offset as a rank's slice uses.
TEST(MlaAttention, ProjectionsInFileTypesGiveTheBitsOfTheirF32Copy) {
  // Q6_0: ik_llama.cpp's type for attn_k_b / attn_v_b in published files.
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::F16, GgmlType::BF16, GgmlType::Q6_0}) {
    Case c(21);
    c.n_head = 5, c.qk_nope = 32, c.qk_rope = 16, c.kv_lora = 64, c.v_dim = 32, c.n_ctx = 300, c.n_q = 3;
    c.n_slots = 320;
    c = Case(21, c);
    const int64_t H = c.n_head, N = c.qk_nope, R = c.kv_lora, V = c.v_dim;
    std::vector<uint8_t> uk_q, uv_q, fused_q;
    std::vector<float> uk_f, uv_f, fused_f;
    const int64_t uk_rb = store_rows(type, c.w_uk, N, uk_q, uk_f);
    const int64_t uv_rb = store_rows(type, c.w_uv, R, uv_q, uv_f);
    // attn_kv_b: per head, the K rows (w_uk_t, [N][R]) then the V rows ([V][R]).
    std::vector<float> fused(H * (N + V) * R);
    for (int64_t h = 0; h < H; ++h) {
      std::copy_n(c.w_uk_t.data() + h * N * R, N * R, fused.data() + h * (N + V) * R);
      std::copy_n(c.w_uv.data() + h * V * R, V * R, fused.data() + (h * (N + V) + N) * R);
    }
    const int64_t kv_rb = store_rows(type, fused, R, fused_q, fused_f);
    std::vector<float> uk_t_f(H * N * R), uv_fused_f(H * V * R);
    for (int64_t h = 0; h < H; ++h) {
      std::copy_n(fused_f.data() + h * (N + V) * R, N * R, uk_t_f.data() + h * N * R);
      std::copy_n(fused_f.data() + (h * (N + V) + N) * R, V * R, uv_fused_f.data() + h * V * R);
    }
    const std::string name(ggml_type_name(type));
    ThreadPool pool(2);
    AttnScratch scratch;
    auto outputs = [&](MlaAttnParams p) {
      std::vector<std::vector<float>> o;
      for (int k = 0; k < 4; ++k) {
        if (k == 0) mla_attention_mqa(p, pool, scratch);
        if (k == 1) mla_attention_mha(p, pool, scratch);
        if (k == 2) mla_attention_mqa_ref(p);
        if (k == 3) mla_attention_mha_ref(p);
        o.push_back(c.out);
      }
      return o;
    };
    // Split: MQA's W_UK and W_UV in place; MHA's W_UK in F32 (the transpose, as at load).
    auto p = c.params();
    p.w_uk = uk_f.data(), p.w_uv = uv_f.data(), p.w_uk_t = uk_t_f.data();
    const auto want_split = outputs(p);
    p.w_uk = MlaProj(uk_q.data(), type, uk_rb, 0);
    p.w_uv = MlaProj(uv_q.data(), type, uv_rb, 0);
    EXPECT_EQ(outputs(p), want_split) << name << ": split";
    // Fused: MHA's W_UK and W_UV in place, N + V rows per head.
    p = c.params();
    p.w_uk = uk_f.data(), p.w_uv = uv_fused_f.data(), p.w_uk_t = uk_t_f.data();
    const auto want_fused = outputs(p);
    p.w_uk_t = MlaProj(fused_q.data(), type, kv_rb, N + V);
    p.w_uv = MlaProj(fused_q.data() + N * kv_rb, type, kv_rb, N + V);
    EXPECT_EQ(outputs(p), want_fused) << name << ": fused";
    // Heads [2, H) alone: the views from head 2 give those heads' columns of the full output.
    auto ps = p;
    ps.n_head = H - 2;
    ps.q = c.q.data() + 2 * (N + c.qk_rope);
    ps.w_uk = MlaProj(uk_f.data()).from_head(2, R, N);
    ps.w_uk_t = p.w_uk_t.from_head(2, N, R);
    ps.w_uv = p.w_uv.from_head(2, V, R);
    std::vector<float> part(c.n_q * H * V, 0.0f);
    ps.out = part.data() + 2 * V;
    mla_attention_mha(ps, pool, scratch);
    for (int64_t i = 0; i < c.n_q; ++i)
      for (int64_t k = 2 * V; k < H * V; ++k)
        ASSERT_EQ(part[i * H * V + k], want_fused[1][i * H * V + k]) << name << ": head slice, query " << i;
  }
}

// ---- the exact kernels (attention_exact.cpp) ----

// A case's cache stored in `type`, the params reading it.
struct StoredCache {
  std::vector<uint8_t> bytes;
  MlaAttnParams params(Case& c, GgmlType type) {
    const int64_t row_len = c.kv_lora + c.qk_rope, rb = ggml_row_bytes(type, row_len);
    bytes.resize(c.n_slots * rb);
    for (int64_t s = 0; s < c.n_slots; ++s)
      quantize_row(type, c.cache.data() + s * row_len, bytes.data() + s * rb, row_len);
    auto p = c.params();
    p.cache = bytes.data(), p.cache_type = type, p.cache_row_bytes = rb;
    return p;
  }
};

// Both exact paths, and the double references, give the same F32 bits: each is the exact result
// rounded once (a mismatch would need an output within ~1e-15 of a rounding midpoint; with these
// fixed inputs there is none). Shapes cross the 64-row key blocks and MQA tiles, the MQA
// register tiles (8 rows, 8 row elements) and the 512-row parts (and, past 8192 rows, parts of
// 1024: at most 16 parts), with head counts below, at and above the 16-head group, in every cache
// dtype.
TEST(MlaAttentionExact, PathsAndReferencesGiveTheSameBits) {
  struct Shape {
    int64_t n_head, qk_nope, qk_rope, kv_lora, v_dim, n_ctx, n_q;
  };
  const Shape shapes[] = {{3, 16, 8, 32, 12, 19, 5},
                          {16, 32, 16, 64, 32, 130, 7},
                          {20, 16, 32, 64, 16, 1100, 3},
                          {4, 24, 8, 40, 20, 67, 67},
                          {5, 16, 16, 32, 16, 8300, 2}};
  int64_t n_compared = 0;
  for (const Shape& sh : shapes)
    for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0}) {
      if (type == GgmlType::Q8_0 && (sh.kv_lora + sh.qk_rope) % 32 != 0) continue;
      Case c(31);
      c.n_head = sh.n_head, c.qk_nope = sh.qk_nope, c.qk_rope = sh.qk_rope, c.kv_lora = sh.kv_lora;
      c.v_dim = sh.v_dim, c.n_ctx = sh.n_ctx, c.n_q = sh.n_q, c.n_slots = sh.n_ctx + 9;
      c = Case(31 + static_cast<uint32_t>(sh.n_ctx), c);
      StoredCache stored;
      const auto p = stored.params(c, type);
      const std::string name = std::string(ggml_type_name(type)) + " ctx " + std::to_string(sh.n_ctx);
      ThreadPool pool(2);
      AttnScratch scratch;
      mla_attention_mha_exact(p, pool, scratch);
      const auto mha = c.out;
      mla_attention_mqa_exact(p, pool, scratch);
      const auto mqa = c.out;
      mla_attention_mha_ref(p);
      const auto mha_ref = c.out;
      mla_attention_mqa_ref(p);
      EXPECT_EQ(mha, mqa) << name << ": the exact paths differ";
      EXPECT_EQ(mha, mha_ref) << name << ": exact MHA is not the double reference rounded";
      EXPECT_EQ(mqa, c.out) << name << ": exact MQA is not the double reference rounded";
      n_compared += static_cast<int64_t>(mha.size());
    }
  EXPECT_GT(n_compared, 10000);
}

// The F32 kernels are not bit-equal across the paths (the reason the exact ones exist): on the
// same inputs some outputs differ, by an ulp or so.
TEST(MlaAttentionExact, TheF32PathsDifferInTheLastBits) {
  Case c(41);
  c.n_head = 16, c.qk_nope = 32, c.qk_rope = 16, c.kv_lora = 64, c.v_dim = 32, c.n_ctx = 130, c.n_q = 7;
  c.n_slots = 140;
  c = Case(41, c);
  auto p = c.params();
  ThreadPool pool(2);
  AttnScratch scratch;
  mla_attention_mha(p, pool, scratch);
  const auto mha = c.out;
  mla_attention_mqa(p, pool, scratch);
  EXPECT_NE(mha, c.out);
  EXPECT_LT(max_rel(mha, c.out), 1e-5);
}

// A query's bits depend only on its own rows: not on the thread count, on the other queries of
// the call (a prompt in chunks), nor on a selection that lists every visible row (DSA = dense).
TEST(MlaAttentionExact, QueryBitsIndependentOfThreadsChunksAndWholeSelection) {
  for (int path = 0; path < 2; ++path) {
    Case c(51);
    c.n_head = 6, c.qk_nope = 16, c.qk_rope = 16, c.kv_lora = 32, c.v_dim = 16, c.n_ctx = 1100, c.n_q = 9;
    c.n_slots = 1110;
    c = Case(51, c);
    StoredCache stored;
    auto run = [&](MlaAttnParams p, int threads) {
      ThreadPool pool(threads);
      AttnScratch scratch;
      path ? mla_attention_mqa_exact(p, pool, scratch) : mla_attention_mha_exact(p, pool, scratch);
    };
    const auto p = stored.params(c, GgmlType::F16);
    run(p, 3);
    const auto all = c.out;
    run(p, 1);
    EXPECT_EQ(all, c.out) << "thread count changed the bits, path " << path;
    expect_queries_alone_give_their_batch_bits(p, c, all, run, 4);
    std::vector<int32_t> sel(c.n_q * c.n_ctx), count(c.n_q);
    for (int64_t i = 0; i < c.n_q; ++i) {
      count[i] = static_cast<int32_t>(c.n_ctx - c.n_q + i + 1);
      std::iota(sel.begin() + i * c.n_ctx, sel.begin() + i * c.n_ctx + count[i], 0);
    }
    auto ps = p;
    ps.sel = sel.data(), ps.sel_count = count.data(), ps.sel_stride = c.n_ctx;
    run(ps, 2);
    EXPECT_EQ(all, c.out) << "the whole selection differs from dense, path " << path;
  }
}

// The exact MQA kernel dots W_UK / W_UV straight from Q8_0, Q6_0 and Q6_K rows (levels times scales)
// and reads other types through a head's F32 copy: for every type the bits are those of the rows
// dequantized to F32 up front, of the double references and of the exact MHA path on that copy;
// a query alone gives its bits in the batch. The head widths (256) let K-quant rows hold W_UK
// too; v_dim 20 leaves rows past the last whole group of 8.
TEST(MlaAttentionExact, ProjectionsInFileTypesGiveTheBitsOfTheirF32Copy) {
  for (GgmlType type :
       {GgmlType::Q8_0, GgmlType::Q6_0, GgmlType::Q6_K, GgmlType::Q4_K, GgmlType::F16, GgmlType::BF16}) {
    Case c(71);
    c.n_head = 3, c.qk_nope = 256, c.qk_rope = 16, c.kv_lora = 256, c.v_dim = 20, c.n_ctx = 300, c.n_q = 5;
    c.n_slots = 310;
    c = Case(71, c);
    const int64_t H = c.n_head, N = c.qk_nope, R = c.kv_lora;
    std::vector<uint8_t> uk_q, uv_q;
    std::vector<float> uk_f, uv_f;
    const int64_t uk_rb = store_rows(type, c.w_uk, N, uk_q, uk_f);
    const int64_t uv_rb = store_rows(type, c.w_uv, R, uv_q, uv_f);
    std::vector<float> uk_t_f(H * N * R);  // MHA's W_UK: the copy transposed per head
    for (int64_t h = 0; h < H; ++h)
      for (int64_t r = 0; r < R; ++r)
        for (int64_t n = 0; n < N; ++n) uk_t_f[(h * N + n) * R + r] = uk_f[(h * R + r) * N + n];
    const std::string name(ggml_type_name(type));
    ThreadPool pool(2);
    AttnScratch scratch;
    auto p = c.params();
    p.w_uk = uk_f.data(), p.w_uk_t = uk_t_f.data(), p.w_uv = uv_f.data();
    mla_attention_mqa_exact(p, pool, scratch);
    const auto copy = c.out;
    mla_attention_mqa_ref(p);
    EXPECT_EQ(copy, c.out) << name << ": exact MQA on the F32 copy is not the double reference rounded";
    mla_attention_mha_exact(p, pool, scratch);
    EXPECT_EQ(copy, c.out) << name << ": the exact paths differ on the F32 copy";
    p.w_uk = MlaProj(uk_q.data(), type, uk_rb, 0);
    p.w_uv = MlaProj(uv_q.data(), type, uv_rb, 0);
    std::fill(c.out.begin(), c.out.end(), 0.0f);
    mla_attention_mqa_exact(p, pool, scratch);
    EXPECT_EQ(copy, c.out) << name << ": the rows in place give other bits than their F32 copy";
    expect_queries_alone_give_their_batch_bits(
        p, c, copy,
        [&](MlaAttnParams pi, int threads) {
          ThreadPool tp(threads);
          AttnScratch s;
          mla_attention_mqa_exact(pi, tp, s);
        },
        2);
  }
}

// A sparse (strided) selection: both exact paths give the double reference's bits over the same rows.
TEST(MlaAttentionExact, SparseSelectionMatchesTheReference) {
  Case c(61);
  c.n_head = 17, c.qk_nope = 16, c.qk_rope = 16, c.kv_lora = 32, c.v_dim = 16, c.n_ctx = 700, c.n_q = 4;
  c.n_slots = 710;
  c = Case(61, c);
  std::vector<int32_t> sel(c.n_q * c.n_ctx), count(c.n_q);
  for (int64_t i = 0; i < c.n_q; ++i) {
    int32_t n = 0;
    for (int64_t j = i; j < c.n_ctx - c.n_q + i + 1; j += 3 + i) sel[i * c.n_ctx + n++] = static_cast<int32_t>(j);
    count[i] = n;
  }
  auto p = c.params();
  p.sel = sel.data(), p.sel_count = count.data(), p.sel_stride = c.n_ctx;
  ThreadPool pool(2);
  AttnScratch scratch;
  mla_attention_mqa_ref(p);
  const auto ref = c.out;
  mla_attention_mqa_exact(p, pool, scratch);
  EXPECT_EQ(ref, c.out);
  mla_attention_mha_exact(p, pool, scratch);
  EXPECT_EQ(ref, c.out);
}

}  // namespace
}  // namespace mla
