// Exact MLA attention, decompressed (MHA) path (attention_exact.h: why both paths run in double).
//
// Per head, 64-row key blocks (aligned to context row 0) are decompressed (k = W_UK c, v = W_UV c,
// in double, 64 latent rows per pass) once for every query that sees a row of the block, and
// folded into each such query's running softmax state, six queries per register tile.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
// GCC 12 flags the deliberately undefined pass-through operand of its own AVX-512 conversion
// intrinsics (inlined from the row loads) as maybe uninitialized.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "kernels/attention.h"
#include "kernels/attention_exact.h"
#include "kernels/attention_rows.h"
#include "kernels/simd.h"

namespace mla {
namespace {

using namespace simd;  // NOLINT(google-build-using-namespace): the kernels' vector vocabulary
using exact::Carve;

constexpr int64_t kKeyBlock = 64;                             // context rows decompressed at a time, from row 0
constexpr int kNJ = static_cast<int>(kKeyBlock / kF64Lanes);  // row vectors in a block
// Register tiles: kTQ queries (or decompressed outputs) x kJV row (or value) vectors, 24
// accumulators on AVX-512 (12 where the register file has 16): each vector loaded from the block
// feeds kTQ FMAs and each broadcast kJV. (4 x 4 tiles ran at 79% of the FMA peak from L1 here,
// 6 x 4 at 100%, and the kernel twice as fast as with 2 x 8 tiles.)
constexpr int kJV = kF64Lanes == 8 ? 4 : 2;
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
    for (int v = 0; v < kJV; ++v) a[d][v] = first ? f64v{} : load(out + (d0 + d) * kKeyBlock + (jv0 + v) * kF64Lanes);
  for (int64_t r = r0; r < r1; ++r) {
    f64v x[kJV];
    for (int v = 0; v < kJV; ++v) x[v] = load(ct + r * kKeyBlock + (jv0 + v) * kF64Lanes);
    for (int d = 0; d < ND; ++d) {
      const f64v b = splat(wd[d * kRChunk + (r - r0)]);
      for (int v = 0; v < kJV; ++v) a[d][v] = fmav(b, x[v], a[d][v]);
    }
  }
  for (int d = 0; d < ND; ++d)
    for (int v = 0; v < kJV; ++v) store(out + (d0 + d) * kKeyBlock + (jv0 + v) * kF64Lanes, a[d][v]);
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
      for (int v = 0; v < kJV; ++v) x[v] = load(kt + d * kKeyBlock + (jv0 + v) * kF64Lanes);
      for (int q = 0; q < Q; ++q) {
        const f64v b = splat(qd[q][d]);
        for (int v = 0; v < kJV; ++v) a[q][v] = fmav(b, x[v], a[q][v]);
      }
    }
    for (int q = 0; q < Q; ++q)
      for (int v = 0; v < kJV; ++v) store(s + q * kKeyBlock + (jv0 + v) * kF64Lanes, a[q][v]);
  }
}

// acc[q][e] += Σ_j w[q][j] · v[j][e] over rows j < nr (a row a query does not see has w = 0, which
// adds exactly nothing); v: [kKeyBlock][ldv], ldv a multiple of kJV vectors.
template <int Q>
void block_values(const double* w, const double* v, int64_t ldv, int64_t nr, double* const* acc) {
  for (int64_t e0 = 0; e0 < ldv; e0 += kJV * kF64Lanes) {
    f64v a[Q][kJV];
    for (int q = 0; q < Q; ++q)
      for (int k = 0; k < kJV; ++k) a[q][k] = load(acc[q] + e0 + k * kF64Lanes);
    for (int64_t j = 0; j < nr; ++j) {
      f64v x[kJV];
      for (int k = 0; k < kJV; ++k) x[k] = load(v + j * ldv + e0 + k * kF64Lanes);
      for (int q = 0; q < Q; ++q) {
        const f64v b = splat(w[q * kKeyBlock + j]);
        for (int k = 0; k < kJV; ++k) a[q][k] = fmav(b, x[k], a[q][k]);
      }
    }
    for (int q = 0; q < Q; ++q)
      for (int k = 0; k < kJV; ++k) store(acc[q] + e0 + k * kF64Lanes, a[q][k]);
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
  f64v mx = load(s);
  for (int v = 1; v < kNJ; ++v) mx = vmax(mx, load(s + v * kF64Lanes));
  double m_new = m;
  for (int k = 0; k < kF64Lanes; ++k) m_new = std::max(m_new, mx[k]);
  const double alpha = exp_nonpos(m - m_new);
  m = m_new;
  f64v sum{};
  const f64v mv = splat(m_new);
  for (int v = 0; v < kNJ; ++v) {
    const f64v e = exp_nonpos(load(s + v * kF64Lanes) - mv);
    store(s + v * kF64Lanes, e);
    sum += e;
  }
  l = l * alpha + hsum(sum);
  if (alpha != 1.0)
    for (int64_t e = 0; e < ldv; ++e) acc[e] *= alpha;
}

// A thread's buffer, described once: sized by Carve{} and carved by Carve{base}. The head's W_UK and
// W_UV are widened to double once (widen_passes: 1.8 MB at GLM-5's widths; each value serves every
// block, where converting per block cost 6% of the kernel).
struct MhaBuffers {
  float* rows;  // 8 context rows dequantized (F32)
  double* ct;   // [row_len][kKeyBlock]: the block's rows transposed
  double* kt;   // [qk_head][kKeyBlock]: W_UK c, then k_pe
  double* vt;   // [v_dim][kKeyBlock]: W_UV c
  double* vr;   // [kKeyBlock][ldv]: vt transposed back
  double* sc;   // [kTQ][kKeyBlock]: a register tile's scores, then weights
  double* wkd;  // the head's W_UK in double (widen_passes)
  double* wvd;  // the head's W_UV in double
  double* qd;   // [n_q][qk_head]: the head's queries in double
  double* m;    // [n_q]: running max
  double* l;    // [n_q]: running sum
  double* acc;  // [n_q][ldv]: running output
};
MhaBuffers mha_buffers(const MlaAttnParams& p, int64_t ldv, Carve& c) {
  const int64_t qk_head = p.qk_nope + p.qk_rope, row_len = p.kv_lora + p.qk_rope;
  MhaBuffers b;
  b.rows = c.take_as<float>(4 * row_len);
  b.ct = c.take(row_len * kKeyBlock);
  b.kt = c.take(qk_head * kKeyBlock);
  b.vt = c.take(p.v_dim * kKeyBlock);
  b.vr = c.take(kKeyBlock * ldv);
  b.sc = c.take(kTQ * kKeyBlock);
  b.wkd = c.take(pass_doubles(p.qk_nope, p.kv_lora));
  b.wvd = c.take(pass_doubles(p.v_dim, p.kv_lora));
  b.qd = c.take(p.n_q * qk_head);
  b.m = c.take(p.n_q);
  b.l = c.take(p.n_q);
  b.acc = c.take(p.n_q * ldv);
  return b;
}

// The block's rows [j0, j0 + nr) transposed into ct [row_len][kKeyBlock], 8 rows at a time (each
// 64-byte line of ct written whole); rows past nr are zeros.
void load_block_transposed(const MlaAttnParams& p, DequantizeFn dq, int64_t j0, int64_t nr, float* rows, double* ct) {
  const int64_t row_len = p.kv_lora + p.qk_rope;
  for (int64_t r0 = 0; r0 < kKeyBlock; r0 += 8) {
    for (int64_t k = 0; k < 8; ++k) {
      float* f = rows + k * row_len;
      if (r0 + k < nr)
        attn::load_row(p, dq, j0 + r0 + k, f);
      else
        std::fill(f, f + row_len, 0.0f);
    }
    for (int64_t c = 0; c < row_len; ++c)
      for (int64_t k = 0; k < 8; ++k) ct[c * kKeyBlock + r0 + k] = rows[k * row_len + c];
  }
}

// Which rows of the block [j0, j0 + nr) query i sees (v[j - j0]); a selection's cursor moves past them.
void mark_visible(const MlaAttnParams& p, int64_t i, int64_t j0, int64_t nr, int64_t& cursor, bool* v) {
  const attn::QueryRows rows = attn::rows_of(p, i);
  std::fill(v, v + kKeyBlock, false);
  if (rows.list) {
    for (; cursor < rows.n && rows[cursor] < j0 + nr; ++cursor) v[rows[cursor] - j0] = true;
  } else {
    std::fill(v, v + std::clamp<int64_t>(rows.n - j0, 0, nr), true);
  }
}

// Head h over every block any query sees: the head's queries' running state in b, then out.
// cursor, rel: per query, the next selected row (sparse); the block's queries.
void mha_head(const MlaAttnParams& p, DequantizeFn dq, int64_t h, int64_t n_rows, int64_t ldv, const MhaBuffers& b,
              float* wbuf, int64_t* cursor, int64_t* rel) {
  const int64_t qk_head = p.qk_nope + p.qk_rope;
  const float* wk = mla_proj_head(p.w_uk_t, h, p.qk_nope, p.kv_lora, wbuf);  // [qk_nope][kv_lora]
  const float* wv = mla_proj_head(p.w_uv, h, p.v_dim, p.kv_lora, wbuf + p.qk_nope * p.kv_lora);
  widen_passes(wk, p.qk_nope, p.kv_lora, b.wkd);
  widen_passes(wv, p.v_dim, p.kv_lora, b.wvd);
  for (int64_t i = 0; i < p.n_q; ++i) {
    const float* q = p.q + i * p.q_stride + h * qk_head;
    for (int64_t d = 0; d < qk_head; ++d) b.qd[i * qk_head + d] = q[d];
    b.m[i] = -std::numeric_limits<double>::infinity();
    b.l[i] = 0;
    std::fill(b.acc + i * ldv, b.acc + (i + 1) * ldv, 0.0);
    cursor[i] = 0;
  }
  bool vis[kTQ * kKeyBlock];  // which rows of the block each of the tile's queries sees
  for (int64_t j0 = 0; j0 < n_rows; j0 += kKeyBlock) {
    const int64_t nr = std::min(kKeyBlock, n_rows - j0);
    // The queries that see a row of this block.
    int64_t n_rel = 0;
    for (int64_t i = 0; i < p.n_q; ++i) {
      const attn::QueryRows rows = attn::rows_of(p, i);
      if (rows.list ? (cursor[i] < rows.n && rows[cursor[i]] < j0 + nr) : rows.n > j0) rel[n_rel++] = i;
    }
    if (n_rel == 0) continue;
    load_block_transposed(p, dq, j0, nr, b.rows, b.ct);
    // k = [W_UK c | k_pe] and v = W_UV c of the block's rows.
    decompress_t(b.ct, b.wkd, p.qk_nope, p.kv_lora, b.kt);
    std::memcpy(b.kt + p.qk_nope * kKeyBlock, b.ct + p.kv_lora * kKeyBlock, sizeof(double) * p.qk_rope * kKeyBlock);
    decompress_t(b.ct, b.wvd, p.v_dim, p.kv_lora, b.vt);
    for (int64_t j = 0; j < kKeyBlock; ++j) {
      for (int64_t e = 0; e < p.v_dim; ++e) b.vr[j * ldv + e] = b.vt[e * kKeyBlock + j];
      for (int64_t e = p.v_dim; e < ldv; ++e) b.vr[j * ldv + e] = 0.0;
    }
    // Queries kTQ at a time: scores, each one's softmax step, then the weighted values.
    for (int64_t k = 0; k < n_rel; k += kTQ) {
      const int nq = static_cast<int>(std::min<int64_t>(kTQ, n_rel - k));
      const double* qs[kTQ];
      double* accs[kTQ];
      for (int u = 0; u < nq; ++u) {
        const int64_t i = rel[k + u];
        qs[u] = b.qd + i * qk_head;
        accs[u] = b.acc + i * ldv;
        mark_visible(p, i, j0, nr, cursor[i], vis + u * kKeyBlock);
      }
      kBlockScores[nq - 1](qs, b.kt, qk_head, b.sc);
      for (int u = 0; u < nq; ++u) {
        const int64_t i = rel[k + u];
        block_softmax(b.sc + u * kKeyBlock, vis + u * kKeyBlock, p.kq_scale, b.m[i], b.l[i], accs[u], ldv);
      }
      kBlockValues[nq - 1](b.sc, b.vr, ldv, nr, accs);
    }
  }
  for (int64_t i = 0; i < p.n_q; ++i) {
    float* out = p.out + i * p.out_stride + h * p.v_dim;
    for (int64_t e = 0; e < p.v_dim; ++e) out[e] = static_cast<float>(b.acc[i * ldv + e] / b.l[i]);
  }
}

}  // namespace

void mla_attention_mha_exact(const MlaAttnParams& p, ThreadPool& pool, AttnScratch& scratch) {
  const int nt = pool.n_threads();
  const int64_t ldv = round_up(p.v_dim, kJV * kF64Lanes);
  const DequantizeFn dq = p.cache_type == GgmlType::F32 ? nullptr : dequantize_fn(p.cache_type);
  Carve size;
  mha_buffers(p, ldv, size);
  exact::reserve_thread_buffers(scratch, nt, static_cast<size_t>(size.used()));
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
    Carve carve(scratch.exact_per_thread[t].data());
    const MhaBuffers b = mha_buffers(p, ldv, carve);
    int64_t* cursor = scratch.exact_rows[t].data();
    for (int64_t h = h0; h < h1; ++h)
      mha_head(p, dq, h, n_rows, ldv, b, scratch.heads[t].data(), cursor, cursor + p.n_q);
  });
}

}  // namespace mla
