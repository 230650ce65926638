// Exact MLA attention, absorbed (MQA) path (attention_exact.h: why both paths run in double).
//
// Per query the absorbed q (W_UKᵀ q_nope, and q_pe, times kq_scale) is laid out [row element][head];
// the query's rows go in parts (at most 16, whole 512-row units, fixed by its row count alone, so a
// part is the same whatever the batch or the threads), each part in 64-row tiles converted to
// double once for all the head groups (up to 16 heads each) a thread takes. Per group, both
// products run with the heads along the vector and a tile value broadcast: scores 8 rows x 16 heads
// in registers, then an online softmax in double, then Σ p c 8 row elements x 16 heads (the output
// kept [row element][head]). Parts are folded in order, then un-absorbed by W_UV.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
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

// Context row j as doubles into out (n = kv_lora + qk_rope values, then zeros up to ld).
inline void load_row_f64(const MlaAttnParams& p, DequantizeFn dq, int64_t j, float* fbuf, double* out, int64_t ld) {
  const int64_t n = p.kv_lora + p.qk_rope;
  attn::load_row(p, dq, j, fbuf);
  for (int64_t c = 0; c < n; ++c) out[c] = fbuf[c];
  for (int64_t c = n; c < ld; ++c) out[c] = 0.0;
}

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
constexpr int kAccRegs = kF64Lanes == 8 ? 16 : 8;

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
    for (int v = 0; v < NV; ++v) qv[v] = load(q + c * ldq + v * kF64Lanes);
    for (int r = 0; r < R; ++r) {
      const f64v b = splat(tile[r * ldt + c]);
      for (int v = 0; v < NV; ++v) acc[r][v] = fmav(b, qv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) store(s + r * lds + v * kF64Lanes, acc[r][v]);
}

// For C consecutive row elements c: o[c][lane] = alpha[lane] · o[c][lane] + Σ_r w[r][lane] ·
// tile[r][c], the NV head vectors of a group (o: [row elem][ldo], the group's heads at its start).
template <int C, int NV>
void weighted_cols(const double* w, int64_t ldw, const double* tile, int64_t ldt, int64_t nr, const f64v* alpha,
                   double* o, int64_t ldo) {
  f64v acc[C][NV];
  for (int c = 0; c < C; ++c)
    for (int v = 0; v < NV; ++v) acc[c][v] = load(o + c * ldo + v * kF64Lanes) * alpha[v];
  for (int64_t r = 0; r < nr; ++r) {
    f64v wv[NV];
    for (int v = 0; v < NV; ++v) wv[v] = load(w + r * ldw + v * kF64Lanes);
    for (int c = 0; c < C; ++c) {
      const f64v b = splat(tile[r * ldt + c]);
      for (int v = 0; v < NV; ++v) acc[c][v] = fmav(b, wv[v], acc[c][v]);
    }
  }
  for (int c = 0; c < C; ++c)
    for (int v = 0; v < NV; ++v) store(o + c * ldo + v * kF64Lanes, acc[c][v]);
}

// The query block's and each thread's buffers, described once: MqaLayout sizes them (Carve{}) and
// each phase carves its own from a thread's buffer (Carve{base}).
struct AttendBuffers {
  float* row;      // one context row dequantized (F32, in the room of ldt doubles)
  double* tile;    // [kTile][ldt]: kTile rows widened
  double* scores;  // [kTile][group]: a group's scores, then its weights
};
struct ProjBuffers {
  double* in;    // [nq][n_in]: the vectors dotted with a head's projection rows
  double* dots;  // [nq][n_out]
};

struct MqaLayout {
  int64_t row_len, ldt, kvp, group, n_groups, hp, part_doubles;
  explicit MqaLayout(const MlaAttnParams& p) {
    row_len = p.kv_lora + p.qk_rope;
    ldt = round_up(row_len, kF64Lanes);
    kvp = round_up(p.kv_lora, kF64Lanes);
    group = std::min<int64_t>(kMaxGroup, round_up(p.n_head, kF64Lanes));
    hp = round_up(p.n_head, group);
    n_groups = hp / group;
    part_doubles = hp * (2 + kvp);  // max[hp], sum[hp], out[kvp][hp]
  }
  AttendBuffers attend(Carve& c) const {
    AttendBuffers b;
    b.row = c.take_as<float>(ldt);
    b.tile = c.take(kTile * ldt);
    b.scores = c.take(kTile * group);
    return b;
  }
  // The absorb (n_in = qk_nope, n_out = kv_lora) and the un-absorb (kv_lora, v_dim).
  static ProjBuffers proj(Carve& c, int64_t nq, int64_t n_in, int64_t n_out) {
    ProjBuffers b;
    b.in = c.take(nq * n_in);
    b.dots = c.take(nq * n_out);
    return b;
  }
  // The fold's per-head scales of the running state and of the part folded into it.
  double* fold_scales(Carve& c) const { return c.take(2 * hp); }
  // Doubles per thread: the largest phase.
  size_t thread_doubles(const MlaAttnParams& p) const {
    auto used = [](auto phase) {
      Carve c;
      phase(c);
      return c.used();
    };  // a phase's doubles
    return static_cast<size_t>(std::max(
        {used([&](Carve& c) { attend(c); }), used([&](Carve& c) { proj(c, kQueryBlock, p.qk_nope, p.kv_lora); }),
         used([&](Carve& c) { proj(c, kQueryBlock, p.kv_lora, p.v_dim); }), used([&](Carve& c) { fold_scales(c); })}));
  }
};

// One (query, part) over head groups [g0, g1): the part's rows folded into (m, l, o) of each
// group's heads. Each tile of rows is converted to double once for all the groups. q: the query's
// absorbed rows [row elem][hp]; part: its partial, max[hp] | sum[hp] | out[kvp][hp].
template <int NV>
void mqa_part(const MlaAttnParams& p, DequantizeFn dq, const MqaLayout& L, const attn::QueryRows& rows, int64_t k0,
              int64_t k1, int64_t g0, int64_t g1, const double* q, const AttendBuffers& buf, double* part) {
  constexpr int G = NV * kF64Lanes;
  constexpr int R = std::max(1, kAccRegs / NV);  // tile rows per score register tile
  constexpr int C = std::max(1, kAccRegs / NV);  // row elements per weighted register tile
  double* tile = buf.tile;
  double* s = buf.scores;
  for (int64_t h = g0 * G; h < g1 * G; ++h) part[h] = -std::numeric_limits<double>::infinity(), part[L.hp + h] = 0;
  double* out = part + 2 * L.hp;
  for (int64_t c = 0; c < L.kvp; ++c) std::fill(out + c * L.hp + g0 * G, out + c * L.hp + g1 * G, 0.0);
  for (int64_t t0 = k0; t0 < k1; t0 += kTile) {
    const int64_t nr = std::min(kTile, k1 - t0);
    for (int64_t r = 0; r < nr; ++r) {
      if (t0 + r + 4 < k1) attn::prefetch_row(p, rows[t0 + r + 4]);
      load_row_f64(p, dq, rows[t0 + r], buf.row, tile + r * L.ldt, L.ldt);
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
        f64v mx = load(s + v * kF64Lanes);
        for (int64_t k = 1; k < nr; ++k) mx = vmax(mx, load(s + k * G + v * kF64Lanes));
        const f64v m_old = load(m + v * kF64Lanes), m_new = vmax(m_old, mx);
        alpha[v] = exp_nonpos(m_old - m_new);  // 0 on the first tile (m_old = -inf), where o is 0
        store(m + v * kF64Lanes, m_new);
        f64v sum = load(l + v * kF64Lanes) * alpha[v];
        for (int64_t k = 0; k < nr; ++k) {
          const f64v e = exp_nonpos(load(s + k * G + v * kF64Lanes) - m_new);
          store(s + k * G + v * kF64Lanes, e);
          sum += e;
        }
        store(l + v * kF64Lanes, sum);
      }
      int64_t c = 0;
      for (; c + C <= L.kvp; c += C) weighted_cols<C, NV>(s, G, tile + c, L.ldt, nr, alpha, o + c * L.hp, L.hp);
      for (; c < L.kvp; ++c) weighted_cols<1, NV>(s, G, tile + c, L.ldt, nr, alpha, o + c * L.hp, L.hp);
    }
  }
}

using MqaPartFn = decltype(&mqa_part<1>);
MqaPartFn mqa_part_fn(int64_t group) {
  switch (group / kF64Lanes) {
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
    a[h] = exp_nonpos(m[h] - mx), b[h] = exp_nonpos(m2[h] - mx);
    m[h] = mx;
    l[h] = l[h] * a[h] + l2[h] * b[h];
  }
  for (int64_t c = 0; c < kvp; ++c)
    for (int64_t h = h0; h < h1; ++h) o[c * hp + h] = o[c * hp + h] * a[h] + o2[c * hp + h] * b[h];
}

// One block of at most kQueryBlock queries from qb: where its absorbed queries and parts live.
struct QueryBlock {
  int64_t qb, nq;
  int64_t part_base[kQueryBlock + 1];  // query i's parts are [part_base[i], part_base[i + 1])
  double* qt;                          // [nq][row_len][hp]: the absorbed, scaled queries
  double* parts;                       // [part][part_doubles]
};

// 1. Absorb: qt[i][c][h] = kq_scale · Σ_d W_UK[h][c][d] q_nope[i][h][d]; q_pe · kq_scale after it.
void absorb(const MlaAttnParams& p, const MqaLayout& L, const QueryBlock& B, ThreadPool& pool, AttnScratch& scratch) {
  const int64_t qk_head = p.qk_nope + p.qk_rope, nq = B.nq;
  pool.parallel_for(p.n_head, [&](int64_t h0, int64_t h1, int t) {
    Carve carve(scratch.exact_per_thread[t].data());
    const ProjBuffers b = MqaLayout::proj(carve, nq, p.qk_nope, p.kv_lora);  // q_nope in double, its dots
    for (int64_t h = h0; h < h1; ++h) {
      for (int64_t i = 0; i < nq; ++i) {
        const float* q = p.q + (B.qb + i) * p.q_stride + h * qk_head;
        for (int64_t d = 0; d < p.qk_nope; ++d) b.in[i * p.qk_nope + d] = q[d];
      }
      exact::proj_dots(p.w_uk, h, p.kv_lora, p.qk_nope, nq, b.in, p.qk_nope, b.dots, p.kv_lora,
                       scratch.heads[t].data());
      for (int64_t i = 0; i < nq; ++i) {
        const float* q = p.q + (B.qb + i) * p.q_stride + h * qk_head;
        double* q_i = B.qt + i * L.row_len * L.hp;
        for (int64_t c = 0; c < p.kv_lora; ++c) q_i[c * L.hp + h] = b.dots[i * p.kv_lora + c] * p.kq_scale;
        for (int64_t d = 0; d < p.qk_rope; ++d)
          q_i[(p.kv_lora + d) * L.hp + h] = static_cast<double>(q[p.qk_nope + d]) * p.kq_scale;
      }
    }
  });
}

// 2. Attend: units (query, part, share of the head groups), taken in any order by any thread; the
//    groups are split only when there are fewer parts than threads. A group's arithmetic does not
//    depend on the unit or the thread that runs it.
void attend(const MlaAttnParams& p, const MqaLayout& L, const QueryBlock& B, ThreadPool& pool, AttnScratch& scratch) {
  const DequantizeFn dq = p.cache_type == GgmlType::F32 ? nullptr : dequantize_fn(p.cache_type);
  const MqaPartFn part_fn = mqa_part_fn(L.group);
  const int64_t n_parts = B.part_base[B.nq];
  const int64_t n_split = std::clamp<int64_t>((pool.n_threads() + n_parts - 1) / n_parts, 1, L.n_groups);
  const int64_t n_units = n_parts * n_split;
  if (n_units == 0) return;
  std::atomic<int64_t> next{0};
  pool.run([&](int t) {
    Carve carve(scratch.exact_per_thread[t].data());
    const AttendBuffers buf = L.attend(carve);
    for (int64_t u; (u = next.fetch_add(1, std::memory_order_relaxed)) < n_units;) {
      const int64_t k = u % n_split, part_index = u / n_split;
      int64_t i = 0;
      while (B.part_base[i + 1] <= part_index) ++i;
      const attn::QueryRows rows = attn::rows_of(p, B.qb + i);
      const int64_t pr = part_rows(rows.n);
      const int64_t k0 = (part_index - B.part_base[i]) * pr, k1 = std::min(rows.n, k0 + pr);
      part_fn(p, dq, L, rows, k0, k1, k * L.n_groups / n_split, (k + 1) * L.n_groups / n_split,
              B.qt + i * L.row_len * L.hp, buf, B.parts + part_index * L.part_doubles);
    }
  });
}

// 3. Fold each query's parts in order (heads split over the threads: a head's fold is the same
//    whoever runs it), then un-absorb and normalize:
//    out[i][h][e] = (Σ_c W_UV[h][e][c] o[i][h][c]) / l[i][h], rounded to F32 once.
void fold_and_unabsorb(const MlaAttnParams& p, const MqaLayout& L, const QueryBlock& B, ThreadPool& pool,
                       AttnScratch& scratch) {
  const int64_t nq = B.nq;
  pool.parallel_for(p.n_head, [&](int64_t h0, int64_t h1, int t) {
    Carve carve(scratch.exact_per_thread[t].data());
    double* ab = L.fold_scales(carve);
    for (int64_t i = 0; i < nq; ++i) {
      double* first = B.parts + B.part_base[i] * L.part_doubles;
      for (int64_t k = B.part_base[i] + 1; k < B.part_base[i + 1]; ++k) {
        const double* other = B.parts + k * L.part_doubles;
        fold(first, first + L.hp, first + 2 * L.hp, other, other + L.hp, other + 2 * L.hp, h0, h1, L.hp, L.kvp, ab,
             ab + L.hp);
      }
    }
  });
  pool.parallel_for(p.n_head, [&](int64_t h0, int64_t h1, int t) {
    Carve carve(scratch.exact_per_thread[t].data());
    const ProjBuffers b = MqaLayout::proj(carve, nq, p.kv_lora, p.v_dim);  // head h's column of each output
    for (int64_t h = h0; h < h1; ++h) {
      for (int64_t i = 0; i < nq; ++i) {
        const double* first = B.parts + B.part_base[i] * L.part_doubles;
        for (int64_t c = 0; c < p.kv_lora; ++c) b.in[i * p.kv_lora + c] = first[2 * L.hp + c * L.hp + h];
      }
      exact::proj_dots(p.w_uv, h, p.v_dim, p.kv_lora, nq, b.in, p.kv_lora, b.dots, p.v_dim, scratch.heads[t].data());
      for (int64_t i = 0; i < nq; ++i) {
        const double l = B.parts[B.part_base[i] * L.part_doubles + L.hp + h];
        float* out = p.out + (B.qb + i) * p.out_stride + h * p.v_dim;
        for (int64_t e = 0; e < p.v_dim; ++e) out[e] = static_cast<float>(b.dots[i * p.v_dim + e] / l);
      }
    }
  });
}

}  // namespace

void mla_attention_mqa_exact(const MlaAttnParams& p, ThreadPool& pool, AttnScratch& scratch) {
  const MqaLayout L(p);
  exact::reserve_thread_buffers(scratch, pool.n_threads(), L.thread_doubles(p));
  attn::reserve_head_buffers(scratch, pool.n_threads(),
                             static_cast<size_t>(std::max(exact::proj_buffer_floats(p.kv_lora, p.qk_nope),
                                                          exact::proj_buffer_floats(p.v_dim, p.kv_lora))));
  for (int64_t qb = 0; qb < p.n_q; qb += kQueryBlock) {
    QueryBlock B;
    B.qb = qb;
    B.nq = std::min(kQueryBlock, p.n_q - qb);
    B.part_base[0] = 0;
    for (int64_t i = 0; i < B.nq; ++i) {
      const int64_t n = attn::rows_of(p, qb + i).n;
      B.part_base[i + 1] = B.part_base[i] + (n + part_rows(n) - 1) / part_rows(n);
    }
    const size_t q_doubles = static_cast<size_t>(B.nq * L.row_len * L.hp);
    if (scratch.exact_q.size() < q_doubles) scratch.exact_q.resize(q_doubles);
    std::fill(scratch.exact_q.begin(), scratch.exact_q.begin() + q_doubles, 0.0);  // padded heads score 0
    const size_t part_doubles = static_cast<size_t>(B.part_base[B.nq] * L.part_doubles);
    if (scratch.exact_parts.size() < part_doubles) scratch.exact_parts.resize(part_doubles);
    B.qt = scratch.exact_q.data();
    B.parts = scratch.exact_parts.data();
    absorb(p, L, B, pool, scratch);
    attend(p, L, B, pool, scratch);
    fold_and_unabsorb(p, L, B, pool, scratch);
  }
}

}  // namespace mla
