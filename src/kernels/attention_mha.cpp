// The decompressed (MHA) MLA path, tiled in the flash-attention manner.
//
// Per head, the context is cut into key blocks of kBlock rows aligned to context row 0. Each block
// is decompressed into a per-thread tile that stays in cache (k_nope = W_UK_h c_kv and
// v = W_UV_h c_kv for the block's rows, k_pe copied), stored transposed: [dim][row in block]. Then
// every query tile (16 queries, one per vector lane) that sees the block updates its running
// softmax state, all of it vertical over the lanes:
//   s_k    = Σ_d q_d · k_{k,d}                       one fma16 chain over d per key, d in order
//   m'     = max(m, max_k s_k),  α = exp(m - m'),    p_k = exp(s_k - m')
//   l'     = l · α + Σ_k p_k                         keys in ascending order
//   o'_e   = o_e · α + Σ_k v_{k,e} p_k               one fma16 chain over k per output lane
// and at the end out = o / l. A key a query does not see (past its causal limit, outside its DSA
// selection) is an exact identity for that lane: score -inf, weight +0, output left untouched
// (blended, not multiplied by 0, so even a -0 survives), and a block with no key for a lane
// leaves it exactly as it was (α = 1). So a query's output bits depend only on its own rows:
// not on which tile or lane it sits in, the number of queries in the call, how a prompt was
// chunked, or the thread count. Buffers are bounded by the block and by at most kMaxGroupTiles
// query tiles, never by the context length.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <span>
#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif

#include "kernels/attention.h"
#include "kernels/attention_rows.h"
#include "kernels/simd.h"

namespace mla {
namespace {

// The kernels' vector vocabulary: vf is the target's own width; a 16-lane row of the kernel's state
// is kVecs of them (simd16.h's 16-lane type is two registers on AVX2, and GCC moves its broadcasts
// and tile accumulators through the stack there).
using namespace simd;  // NOLINT(google-build-using-namespace)

constexpr int64_t kBlock = 64;             // key rows per block: bits of one uint64_t lane mask
constexpr int64_t kLanes = 16;             // queries per tile (one bit each in a key's lane mask)
constexpr int kVecs = kLanes / kF32Lanes;  // vectors per 16-lane row
constexpr int64_t kMaxGroupTiles = 128;    // query tiles sharing one pass over the blocks (2,048 queries)
// Register tile height: rows of a tile sharing one load of a 16-lane row (kVecs registers). AVX2's
// 16 registers hold 6 x 2 accumulators; AVX-512's 32 hold 12 x 1.
constexpr int kRows = kF32Lanes == 16 ? 12 : 6;

// One 16-lane row (16 queries) as kVecs native vectors; lane-wise operations.
struct Row {
  vf v[kVecs];
};
struct Mask {
  vi v[kVecs];
};
inline Row load_row16(const float* p) {
  Row r;
  for (int i = 0; i < kVecs; ++i) r.v[i] = load(p + i * kF32Lanes);
  return r;
}
inline void store_row16(float* p, const Row& r) {
  for (int i = 0; i < kVecs; ++i) store(p + i * kF32Lanes, r.v[i]);
}
inline Row splat_row(float x) {
  Row r;
  for (auto& v : r.v) v = splat(x);
  return r;
}

// f.operator()<R>(i) for tiles of R = kRows rows over [i, n), the remainder in halving tiles.
template <int R, class F>
void row_tiles(int64_t i, int64_t n, F& f) {
  for (; i + R <= n; i += R) f.template operator()<R>(i);
  if constexpr (R > 1) row_tiles<R / 2>(i, n, f);
}

// s[r][lane] = Σ_{d < n_d} kt[d][key[r]] · qt[d][lane] for r < R: one chain over d per output.
template <int R>
void score_tile(const float* kt, const int32_t* key, const float* qt, int64_t n_d, Row* s) {
  vf acc[R][kVecs] = {};
  for (int64_t d = 0; d < n_d; ++d) {
    vf q[kVecs];
    for (int i = 0; i < kVecs; ++i) q[i] = load(qt + d * kLanes + i * kF32Lanes);
    const float* row = kt + d * kBlock;
    for (int r = 0; r < R; ++r) {
      const vf k = splat(row[key[r]]);
      for (int i = 0; i < kVecs; ++i) acc[r][i] = fmav(k, q[i], acc[r][i]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < kVecs; ++i) s[r].v[i] = acc[r][i];
}

// The same scores with keys in the vector lanes: out[q][k] = Σ_{d < n_d} qt[d][q0 + q] · kt[d][k] for
// q < Q queries from q0 and k < NKV * kF32Lanes consecutive block rows. Each output is the same single
// chain over d, in order, with the same products (multiplication commutes), so it has score_tile's
// bits; but each d costs NKV vector loads and Q broadcasts for Q * NKV multiply-adds, instead of one
// broadcast per multiply-add: the dense blocks of a prefill run at several times the rate.
template <int Q, int NKV>
void score_keys_tile(const float* kt, const float* qt, int64_t q0, int64_t n_d, float (*out)[kBlock]) {
  vf acc[Q][NKV] = {};
  for (int64_t d = 0; d < n_d; ++d) {
    vf k[NKV];
    for (int j = 0; j < NKV; ++j) k[j] = load(kt + d * kBlock + j * kF32Lanes);
    for (int q = 0; q < Q; ++q) {
      const vf x = splat(qt[d * kLanes + q0 + q]);
      for (int j = 0; j < NKV; ++j) acc[q][j] = fmav(x, k[j], acc[q][j]);
    }
  }
  for (int q = 0; q < Q; ++q)
    for (int j = 0; j < NKV; ++j) store(out[q0 + q] + j * kF32Lanes, acc[q][j]);
}

// Key vectors per score_keys_tile; its Q x NKV accumulators, NKV key vectors and a broadcast fill the
// registers with Q = 6 (AVX-512) or 2 (AVX2's 16 registers).
constexpr int kKeyVecs = 4;  // key vectors per pass (64 rows on AVX-512, 32 on AVX2)

// score_tile's scores for every row of [0, n_rows) of the block, computed with keys in the lanes and
// transposed back to one 16-query row per key: s[k] for k < n_rows.
void score_block(const float* kt, const float* qt, int64_t n_d, int64_t n_rows, Row* s) {
  alignas(64) float st[kLanes][kBlock];
  for (int64_t k0 = 0; k0 < n_rows; k0 += kKeyVecs * kF32Lanes) {
    const int64_t nv = std::min<int64_t>(kKeyVecs, (n_rows - k0 + kF32Lanes - 1) / kF32Lanes);
    auto pass = [&]<int NKV>() {
      // 16 queries as 6 + 6 + 4 (AVX-512) or 8 x 2.
      if constexpr (kF32Lanes == 16) {
        score_keys_tile<6, NKV>(kt + k0, qt, 0, n_d, st);
        score_keys_tile<6, NKV>(kt + k0, qt, 6, n_d, st);
        score_keys_tile<4, NKV>(kt + k0, qt, 12, n_d, st);
      } else {
        for (int64_t q0 = 0; q0 < kLanes; q0 += 2) score_keys_tile<2, NKV>(kt + k0, qt, q0, n_d, st);
      }
    };
    switch (nv) {
      case 1:
        pass.template operator()<1>();
        break;
      case 2:
        pass.template operator()<2>();
        break;
      case 3:
        pass.template operator()<3>();
        break;
      default:
        pass.template operator()<4>();
        break;
    }
    const int64_t k1 = std::min(n_rows, k0 + nv * kF32Lanes);
    for (int64_t k = k0; k < k1; ++k)
      for (int i = 0; i < kVecs; ++i)
        for (int l = 0; l < kF32Lanes; ++l) s[k].v[i][l] = st[i * kF32Lanes + l][k - k0];
  }
}

// A run of consecutive listed keys that every real lane sees (plain) or only some (blended).
struct Run {
  int32_t begin, end;
  bool partial;
};

// ot[e][lane] = ot[e][lane] · α + Σ_k vt[e][key[k]] · p[k][lane] for e < R, k in run order; a
// partial key adds only in the lanes of its mask (a blend, so the other lanes keep their bits).
template <int R, bool kPartial>
[[gnu::noinline]] void pv_run(float* ot, const Row* alpha, const float* vt, const int32_t* key, const Row* p,
                              int32_t k0, int32_t k1, const Mask* mask) {
  // The accumulators live in this function alone, not inlined: inlined into the attention loop, GCC
  // stored all of them to the stack after every key (a third of the kernel's time).
  vf acc[R][kVecs];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < kVecs; ++i) {
      acc[r][i] = load(ot + r * kLanes + i * kF32Lanes);
      if (alpha) acc[r][i] = acc[r][i] * alpha->v[i];
    }
  for (int32_t k = k0; k < k1; ++k) {
    const float* col = vt + key[k];
    for (int r = 0; r < R; ++r) {
      const vf v = splat(col[r * kBlock]);
      for (int i = 0; i < kVecs; ++i) {
        if constexpr (kPartial)
          acc[r][i] = mask[k].v[i] ? fmav(v, p[k].v[i], acc[r][i]) : acc[r][i];
        else
          acc[r][i] = fmav(v, p[k].v[i], acc[r][i]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < kVecs; ++i) store(ot + r * kLanes + i * kF32Lanes, acc[r][i]);
}

template <int R>
void pv_tile(float* ot, const Row& alpha, const float* vt, const int32_t* key, const Row* p, const Run* runs,
             int n_runs, const Mask* mask) {
  if (n_runs == 0) return pv_run<R, false>(ot, &alpha, vt, key, p, 0, 0, mask);
  for (int u = 0; u < n_runs; ++u) {
    const Row* a = u == 0 ? &alpha : nullptr;  // the rescale once, before the first key
    if (runs[u].partial)
      pv_run<R, true>(ot, a, vt, key, p, runs[u].begin, runs[u].end, mask);
    else
      pv_run<R, false>(ot, a, vt, key, p, runs[u].begin, runs[u].end, mask);
  }
}

// out[d][key] = Σ_c w[d][c] · ct[c][key] for d < n_rows and the block's first n_grp groups of 16 keys:
// one chain over c per output, whatever tile computes it. A tile is R rows of w by G groups: each c
// costs G x kVecs loads of ct and R broadcasts of w for R x G x kVecs multiply-adds.
template <int R, int G>
void decompress_tile(const float* w, int64_t kv_lora, const float* ct, float* out) {
  vf acc[R][G * kVecs] = {};
  for (int64_t c = 0; c < kv_lora; ++c) {
    vf x[G * kVecs];
    for (int i = 0; i < G * kVecs; ++i) x[i] = load(ct + c * kBlock + i * kF32Lanes);
    for (int r = 0; r < R; ++r) {
      const vf a = splat(w[r * kv_lora + c]);
      for (int i = 0; i < G * kVecs; ++i) acc[r][i] = fmav(a, x[i], acc[r][i]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < G * kVecs; ++i) store(out + r * kBlock + i * kF32Lanes, acc[r][i]);
}

// Rows of w per decompress tile: R x G x kVecs accumulators, G x kVecs inputs and a broadcast.
constexpr int kDecompRows = kF32Lanes == 16 ? 6 : 3;

void decompress(const float* w, int64_t kv_lora, const float* ct, int64_t n_grp, int64_t n_rows, float* out) {
  auto by_groups = [&]<int G>() {
    auto tile = [&]<int R>(int64_t d) { decompress_tile<R, G>(w + d * kv_lora, kv_lora, ct, out + d * kBlock); };
    row_tiles<kDecompRows>(0, n_rows, tile);
  };
  static_assert(kBlock == 4 * kLanes, "a block is at most 4 groups of 16 keys");
  switch (n_grp) {
    case 1:
      return by_groups.template operator()<1>();
    case 2:
      return by_groups.template operator()<2>();
    case 3:
      return by_groups.template operator()<3>();
    default:
      return by_groups.template operator()<4>();
  }
}

// One head's running state for a group of query tiles, and its decompressed block.
struct Work {
  float* ct;   // [kv_lora][kBlock]: the block's c_kv, transposed
  float* kt;   // [qk_head][kBlock]: k_nope rows, then k_pe rows
  float* vt;   // [vp][kBlock]: v rows (rows v_dim.. stay 0)
  float* row;  // 16 context rows as F32, round_up(row_len, 16) apart
  float* qt;   // per tile [qk_head][kLanes]: queries scaled by kq_scale, transposed
  float* m;    // per tile [kLanes]: running max
  float* l;    // per tile [kLanes]: running sum
  float* ot;   // per tile [vp][kLanes]: running output, transposed
};

struct Dims {
  int64_t qk_head, vp, row_len;
};

// A thread's buffer, described once: sized by Carve<float>{}, carved by Carve<float>{base}.
Work work_of(const MlaAttnParams& p, const Dims& d, int64_t n_tiles, attn::Carve<float>& c) {
  Work w{};
  w.ct = c.take(p.kv_lora * kBlock);
  w.kt = c.take(d.qk_head * kBlock);
  w.vt = c.take(d.vp * kBlock);
  w.row = c.take(kLanes * round_up(d.row_len, kLanes));
  w.qt = c.take(n_tiles * d.qk_head * kLanes);
  w.m = c.take(n_tiles * kLanes);
  w.l = c.take(n_tiles * kLanes);
  w.ot = c.take(n_tiles * d.vp * kLanes);
  return w;
}

#if defined(__AVX512F__)
// r[j] = column j of the 16 x 16 matrix whose rows were r[0..15].
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      t[8 * i + j] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + j + 4], 0x88);
      t[8 * i + j + 4] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + j + 4], 0xDD);
    }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xDD);
  }
}
#endif

// The block's first n_grp * 16 context rows from j0 (rows past nb zero), transposed: c_kv into ct,
// k_pe into kt's rows after k_nope. 16 rows at a time through a 16 x 16 register transpose on
// AVX-512 (the element-wise copy it replaces cost a tenth of a 4,096-token prefill's attention).
void transpose_rows(const MlaAttnParams& p, DequantizeFn dq, const Dims& dims, int64_t j0, int64_t nb, int64_t n_grp,
                    const Work& w) {
  const int64_t stride = round_up(dims.row_len, kLanes);
  for (int64_t r0 = 0; r0 < n_grp * kLanes; r0 += kLanes) {
    for (int64_t i = 0; i < kLanes; ++i) {
      float* row = w.row + i * stride;
      if (r0 + i < nb)
        attn::load_row(p, dq, j0 + r0 + i, row);
      else
        std::fill(row, row + dims.row_len, 0.0f);
    }
    auto dst = [&](int64_t c) {
      return c < p.kv_lora ? w.ct + c * kBlock + r0 : w.kt + (p.qk_nope + c - p.kv_lora) * kBlock + r0;
    };
#if defined(__AVX512F__)
    if (p.kv_lora % 16 == 0 && p.qk_rope % 16 == 0) {
      for (int64_t c0 = 0; c0 < dims.row_len; c0 += 16) {
        __m512 v[16];
        for (int i = 0; i < 16; ++i) v[i] = _mm512_loadu_ps(w.row + i * stride + c0);
        transpose16(v);
        for (int j = 0; j < 16; ++j) _mm512_storeu_ps(dst(c0 + j), v[j]);
      }
      continue;
    }
#endif
    for (int64_t c = 0; c < dims.row_len; ++c) {
      float* d = dst(c);
      for (int64_t i = 0; i < kLanes; ++i) d[i] = w.row[i * stride + c];
    }
  }
}

// One query tile over one decompressed block: lane_mask[lane] has bit k set when the lane's query
// attends to block row k; full has the bits every real lane has.
void attend_block(const Dims& dims, const Work& w, int64_t tile, const uint64_t* lane_mask, uint64_t any,
                  uint64_t full) {
  int32_t key[kBlock + kRows];
  int32_t nk = 0;
  for (uint64_t bits = any; bits; bits &= bits - 1) key[nk++] = std::countr_zero(bits);
  for (int r = 0; r < kRows; ++r) key[nk + r] = key[nk - 1];  // score tiles past the end: ignored

  Row s[kBlock + kRows];
  Mask mask[kBlock];
  const float* qt = w.qt + tile * dims.qk_head * kLanes;
  const int32_t span = key[nk - 1] + 1;  // rows [0, span) hold every listed key
  if (2 * nk >= span) {
    // Dense enough (a causal prefill's blocks): every row's score, then the listed ones in order;
    // when the listed keys are rows 0..nk-1 (every block a causal prefill sees), straight into s.
    if (span == nk) {
      score_block(w.kt, qt, dims.qk_head, span, s);
    } else {
      Row all[kBlock];
      score_block(w.kt, qt, dims.qk_head, span, all);
      for (int32_t k = 0; k < nk; ++k) s[k] = all[key[k]];
    }
  } else {
    auto scores = [&]<int R>(int64_t k) { score_tile<R>(w.kt, key + k, qt, dims.qk_head, s + k); };
    row_tiles<kRows>(0, round_up(nk, kRows), scores);
  }

  // Partial keys: -inf scores outside their lanes; runs of plain and partial keys in key order.
  Run runs[kBlock];
  int n_runs = 0;
  const vf neg_inf = splat(-INFINITY);
  vi lane_bit[kVecs];
  for (int i = 0; i < kVecs; ++i)
    for (int l = 0; l < kF32Lanes; ++l) lane_bit[i][l] = 1 << (i * kF32Lanes + l);
  for (int32_t k = 0; k < nk; ++k) {
    const bool partial = !((full >> key[k]) & 1);
    if (partial) {
      int32_t lanes = 0;  // bit l: lane l sees the key
      for (int l = 0; l < kLanes; ++l) lanes |= static_cast<int32_t>((lane_mask[l] >> key[k]) & 1) << l;
      for (int i = 0; i < kVecs; ++i) {
        mask[k].v[i] = (lane_bit[i] & lanes) != 0;
        s[k].v[i] = mask[k].v[i] ? s[k].v[i] : neg_inf;
      }
    }
    if (n_runs > 0 && runs[n_runs - 1].partial == partial)
      runs[n_runs - 1].end = k + 1;
    else
      runs[n_runs++] = Run{k, k + 1, partial};
  }

  // Online softmax: the new max, the rescale of the old state, the block's weights and their sum.
  float* m = w.m + tile * kLanes;
  float* l = w.l + tile * kLanes;
  Row alpha;
  for (int i = 0; i < kVecs; ++i) {
    vf mx = neg_inf;
    for (int32_t k = 0; k < nk; ++k) mx = mx > s[k].v[i] ? mx : s[k].v[i];
    const vf m_old = load(m + i * kF32Lanes);
    const vf m_new = m_old > mx ? m_old : mx;
    // A lane whose max did not move keeps its state exactly (also when it has seen no key yet).
    alpha.v[i] = m_new == m_old ? splat(1.0f) : exp_nonpos(m_old - m_new);
    vf sum{};
    for (const Run& run : std::span(runs, n_runs)) {
      for (int32_t k = run.begin; k < run.end; ++k) {
        vf e = exp_nonpos(s[k].v[i] - m_new);
        if (run.partial) e = mask[k].v[i] ? e : vf{};
        s[k].v[i] = e;
        sum += e;
      }
    }
    store(m + i * kF32Lanes, m_new);
    store(l + i * kF32Lanes, fmav(load(l + i * kF32Lanes), alpha.v[i], sum));
  }

  float* ot = w.ot + tile * dims.vp * kLanes;
  auto pv = [&]<int R>(int64_t e) {
    pv_tile<R>(ot + e * kLanes, alpha, w.vt + e * kBlock, key, s, runs, n_runs, mask);
  };
  row_tiles<kRows>(0, dims.vp, pv);
}

// The query tiles of one unit: queries [i0, i1) in n_gt tiles of kLanes.
struct QueryGroup {
  int64_t i0, i1, n_gt;
};

// Head h's queries of the group scaled and transposed (padding lanes 0); state: max -inf, sum 0,
// output 0.
void start_group(const MlaAttnParams& p, const Dims& dims, const Work& w, int64_t h, const QueryGroup& G) {
  const int64_t qk_head = dims.qk_head;
  for (int64_t tl = 0; tl < G.n_gt; ++tl)
    for (int64_t lane = 0; lane < kLanes; ++lane) {
      const int64_t i = G.i0 + tl * kLanes + lane;
      float* qt = w.qt + tl * qk_head * kLanes + lane;
      const float* q = p.q + i * p.q_stride + h * qk_head;
      for (int64_t d = 0; d < qk_head; ++d) qt[d * kLanes] = i < G.i1 ? q[d] * p.kq_scale : 0.0f;
    }
  std::fill(w.m, w.m + G.n_gt * kLanes, -INFINITY);
  std::fill(w.l, w.l + G.n_gt * kLanes, 0.0f);
  std::fill(w.ot, w.ot + G.n_gt * dims.vp * kLanes, 0.0f);
}

// Which rows of the block from j0 each query of the group attends (lane_mask[tile][lane], bit j for
// row j0 + j); cursor: per query, its place in its DSA selection. Returns the union.
uint64_t block_lane_masks(const MlaAttnParams& p, const QueryGroup& G, int64_t j0, int64_t* cursor,
                          uint64_t (*lane_mask)[kLanes]) {
  uint64_t any = 0;
  for (int64_t tl = 0; tl < G.n_gt; ++tl)
    for (int64_t lane = 0; lane < kLanes; ++lane) {
      const int64_t i = G.i0 + tl * kLanes + lane;
      uint64_t bits = 0;
      if (i < G.i1 && p.sel) {
        const int32_t* sel = p.sel + i * p.sel_stride;
        int64_t& c = cursor[i - G.i0];
        for (; c < p.sel_count[i] && sel[c] < j0 + kBlock; ++c) bits |= uint64_t{1} << (sel[c] - j0);
      } else if (i < G.i1) {
        const int64_t n = std::clamp<int64_t>(p.n_ctx - p.n_q + i + 1 - j0, 0, kBlock);
        bits = n == kBlock ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
      }
      lane_mask[tl][lane] = bits;
      any |= bits;
    }
  return any;
}

// Head h over the group's queries: every block any of them attends, decompressed once (W_UK rows
// wk, W_UV rows wv as F32) and folded into each tile that sees it; then out = o / l (0 for a query
// that attends to no row).
void attend_group(const MlaAttnParams& p, DequantizeFn dq, const Dims& dims, const Work& w, const float* wk,
                  const float* wv, int64_t h, const QueryGroup& G) {
  start_group(p, dims, w, h, G);
  // Rows attended, per query: [0, n_vis) dense; the selection (a cursor into it) with DSA.
  int64_t cursor[kMaxGroupTiles * kLanes] = {};
  int64_t last_row = 0;  // one past the highest row any query of the group attends
  for (int64_t i = G.i0; i < G.i1; ++i) {
    const attn::QueryRows rows = attn::rows_of(p, i);
    if (rows.n > 0) last_row = std::max(last_row, rows[rows.n - 1] + 1);
  }
  uint64_t lane_mask[kMaxGroupTiles][kLanes];
  for (int64_t j0 = 0; j0 < last_row; j0 += kBlock) {
    const uint64_t any = block_lane_masks(p, G, j0, cursor, lane_mask);
    if (!any) continue;
    // Decompress the rows up to the last one attended, in whole key vectors (zero past it).
    const int64_t nb = std::bit_width(any), n_grp = (nb + kLanes - 1) / kLanes;
    transpose_rows(p, dq, dims, j0, nb, n_grp, w);
    decompress(wk, p.kv_lora, w.ct, n_grp, p.qk_nope, w.kt);
    decompress(wv, p.kv_lora, w.ct, n_grp, p.v_dim, w.vt);
    for (int64_t tl = 0; tl < G.n_gt; ++tl) {
      uint64_t tile_any = 0, tile_full = ~uint64_t{0};
      for (int64_t lane = 0; lane < kLanes; ++lane) {
        tile_any |= lane_mask[tl][lane];
        if (G.i0 + tl * kLanes + lane < G.i1) tile_full &= lane_mask[tl][lane];
      }
      if (tile_any) attend_block(dims, w, tl, lane_mask[tl], tile_any, tile_full);
    }
  }
  for (int64_t i = G.i0; i < G.i1; ++i) {
    const int64_t tl = (i - G.i0) / kLanes, lane = (i - G.i0) % kLanes;
    const float l = w.l[tl * kLanes + lane];
    const float inv = l > 0 ? 1.0f / l : 0.0f;
    const float* ot = w.ot + tl * dims.vp * kLanes + lane;
    float* o = p.out + i * p.out_stride + h * p.v_dim;
    for (int64_t e = 0; e < p.v_dim; ++e) o[e] = ot[e * kLanes] * inv;
  }
}

}  // namespace

void mla_attention_mha(const MlaAttnParams& p, ThreadPool& pool, AttnScratch& scratch) {
  if (p.n_q <= 0) return;
  const int nt = pool.n_threads();
  const Dims dims{p.qk_nope + p.qk_rope, round_up(p.v_dim, kRows), p.kv_lora + p.qk_rope};
  const int64_t n_tiles = (p.n_q + kLanes - 1) / kLanes;
  // Units of (head, group of query tiles): groups bound the state, and split heads when there are
  // fewer heads than threads. Which group a query is in changes no arithmetic of its lane.
  const int64_t n_groups = std::max((n_tiles + kMaxGroupTiles - 1) / kMaxGroupTiles,
                                    std::min<int64_t>(n_tiles, (nt + p.n_head - 1) / p.n_head));
  const int64_t group_tiles = (n_tiles + n_groups - 1) / n_groups;
  attn::Carve<float> size;
  work_of(p, dims, group_tiles, size);
  const auto per_thread = static_cast<size_t>(size.used());
  if (static_cast<int>(scratch.per_thread.size()) < nt) scratch.per_thread.resize(nt);
  for (int t = 0; t < nt; ++t)
    if (scratch.per_thread[t].size() < per_thread) scratch.per_thread[t].resize(per_thread);
  attn::reserve_head_buffers(scratch, nt, static_cast<size_t>((p.qk_nope + p.v_dim) * p.kv_lora));
  const DequantizeFn dq = p.cache_type == GgmlType::F32 ? nullptr : dequantize_fn(p.cache_type);

  pool.parallel_for(p.n_head * n_groups, [&](int64_t u0, int64_t u1, int t) {
    attn::Carve<float> carve(scratch.per_thread[t].data());
    const Work w = work_of(p, dims, group_tiles, carve);
    std::fill(w.vt + p.v_dim * kBlock, w.vt + dims.vp * kBlock, 0.0f);
    float* wbuf = scratch.heads[t].data();
    int64_t head_ready = -1;
    const float* wk = nullptr;
    const float* wv = nullptr;
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t h = u / n_groups, g = u % n_groups;
      const int64_t tile0 = g * group_tiles, n_gt = std::min(n_tiles, tile0 + group_tiles) - tile0;
      if (n_gt <= 0) continue;
      if (h != head_ready) {
        wk = mla_proj_head(p.w_uk_t, h, p.qk_nope, p.kv_lora, wbuf);
        wv = mla_proj_head(p.w_uv, h, p.v_dim, p.kv_lora, wbuf + p.qk_nope * p.kv_lora);
        head_ready = h;
      }
      attend_group(p, dq, dims, w, wk, wv, h, {tile0 * kLanes, std::min(p.n_q, (tile0 + n_gt) * kLanes), n_gt});
    }
  });
}

}  // namespace mla
