// The absorbed (MQA) MLA path over the latent cache in its stored dtype.
//
// Per query: q_abs_h = W_UK_hᵀ q_nope_h and q_pe_h, scaled by kq_scale, are laid out transposed
// ([row element][head]), so a score tile is "row element broadcast x 16 heads" multiply-adds and
// every cached row, converted to F32 once into a tile, serves all heads of a group while it is in
// cache. A query's rows (its visible context, or its DSA selection) are cut into splits of kSplit
// rows: per split, scores, the split's max and exp-sums, and Σ p_j c_kv_j; the splits of a
// 1024-row part are folded in order into the part's (max, sum, output) by one thread, and the parts
// are folded in order at the end (flash-decoding). Threads take (query, part, head group) units;
// a head group only changes which lanes a thread computes, never the arithmetic of a lane, so the
// output bits depend on the query's rows alone: not on the thread count, nor on other queries.
#include <algorithm>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/attention_rows.h"
#include "kernels/simd16.h"
#include "kernels/vec.h"

namespace mla {
namespace {

using simd::f32xn;

constexpr int64_t kSplit = 256;        // rows scored and summed per pass (one F32 tile)
constexpr int64_t kSplitsPerPart = 4;  // splits folded in order into one partial result (1024 rows)
constexpr int64_t kPartRows = kSplit * kSplitsPerPart;
constexpr int64_t kQueryBlock = 16;   // queries absorbed and attended per round (bounds the buffers)
constexpr int64_t kPrefetchRows = 4;  // cache rows requested ahead of the one being converted

int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

struct Layout {
  int64_t row_len;      // kv_lora + qk_rope
  int64_t ld;           // F32 tile row stride (row_len rounded up to 16)
  int64_t kvp;          // kv_lora rounded up to 16: the output lanes per head
  int64_t hp;           // heads rounded up to 16
  int64_t n_hvec;       // hp / 16
  int64_t part_floats;  // one (query, part) partial: max[hp], sum[hp], out[hp][kvp]
  explicit Layout(const MlaAttnParams& p)
      : row_len(p.kv_lora + p.qk_rope),
        ld(round16(row_len)),
        kvp(round16(p.kv_lora)),
        hp(round16(p.n_head)),
        n_hvec(hp / 16),
        part_floats(hp * (2 + kvp)) {}
};

// (m, l, o) <- fold((m, l, o), (m2, l2, o2)) for the 16 heads of one vector: the running result
// rescaled to the new max plus the incoming one rescaled to it. In the target's register width
// (simd::f32xn), lane by lane.
void fold16(float* m, float* l, float* o, const float* m2, const float* l2, const float* o2, int64_t kvp, int64_t ldo,
            int64_t ldo2) {
  constexpr int kN = simd::kLanesN;
  for (int l0 = 0; l0 < 16; l0 += kN) {
    const f32xn mo = simd::load_n(m + l0), mi = simd::load_n(m2 + l0);
    const f32xn mx = simd::max_n(mo, mi);
    const f32xn a = simd::exp_n_nonpos(mo - mx), b = simd::exp_n_nonpos(mi - mx);
    simd::store_n(m + l0, mx);
    simd::store_n(l + l0, simd::fma_n(simd::load_n(l + l0), a, simd::load_n(l2 + l0) * b));
    for (int h = 0; h < kN; ++h) {
      const f32xn ah = simd::splat_n(a[h]), bh = simd::splat_n(b[h]);
      float* oh = o + (l0 + h) * ldo;
      const float* o2h = o2 + (l0 + h) * ldo2;
      for (int64_t c = 0; c < kvp; c += kN)
        simd::store_n(oh + c, simd::fma_n(simd::load_n(oh + c), ah, simd::load_n(o2h + c) * bh));
    }
  }
}

struct ThreadBuffers {
  float* tile;    // [kSplit][ld]
  float* scores;  // [kSplit][16 * group vectors]
  float* m;       // split max per group lane
  float* l;       // split sum
  float* o;       // [group lanes][kvp]
  float* absorb;  // [kQueryBlock][kv_lora]: the absorb's dots
};
// A thread's buffer, described once: sized by Carve<float>{}, carved by Carve<float>{base}.
ThreadBuffers thread_buffers(const MlaAttnParams& p, const Layout& L, attn::Carve<float>& c) {
  ThreadBuffers b;
  b.tile = c.take(kSplit * L.ld);
  b.scores = c.take(kSplit * 16 * L.n_hvec);
  b.m = c.take(16 * L.n_hvec);
  b.l = c.take(16 * L.n_hvec);
  b.o = c.take(16 * L.n_hvec * L.kvp);
  b.absorb = c.take(kQueryBlock * p.kv_lora);
  return b;
}
ThreadBuffers thread_buffers(const MlaAttnParams& p, const Layout& L, AttnScratch& scratch, int t) {
  attn::Carve<float> c(scratch.per_thread[t].data());
  return thread_buffers(p, L, c);
}

// One block of at most kQueryBlock queries from qb: where its absorbed queries and parts live.
struct QueryBlock {
  int64_t qb, nq;
  int64_t part_base[kQueryBlock + 1];  // query i's parts are [part_base[i], part_base[i + 1])
  int64_t n_groups;                    // head groups per part (units: n_parts x n_groups)
  float* qt;                           // [nq][row_len][hp]: the absorbed, scaled queries
  float* parts;                        // [part][part_floats]
  // The query of part part_index.
  int64_t query_of(int64_t part_index) const {
    int64_t i = 0;
    while (part_base[i + 1] <= part_index) ++i;
    return i;
  }
};

// 1. Absorb: q_t[i][c][h] = kq_scale · Σ_d W_UK[h][c][d] q_nope[i][h][d]; q_pe scaled after it.
void absorb(const MlaAttnParams& p, const Layout& L, const QueryBlock& B, ThreadPool& pool, AttnScratch& scratch) {
  const int64_t qk_head = p.qk_nope + p.qk_rope, qb = B.qb, nq = B.nq;
  pool.parallel_for(p.n_head, [&](int64_t h0, int64_t h1, int t) {
    float* tmp = thread_buffers(p, L, scratch, t).absorb;
    for (int64_t h = h0; h < h1; ++h) {
      const float* wk = mla_proj_head(p.w_uk, h, p.kv_lora, p.qk_nope, scratch.heads[t].data());
      dot_block_f32(
          nq, p.kv_lora, p.qk_nope, [&](int64_t i) { return p.q + (qb + i) * p.q_stride + h * qk_head; },
          [&](int64_t c) { return wk + c * p.qk_nope; }, tmp, p.kv_lora);
      for (int64_t i = 0; i < nq; ++i) {
        float* q_i = B.qt + i * L.row_len * L.hp;
        const float* pe = p.q + (qb + i) * p.q_stride + h * qk_head + p.qk_nope;
        for (int64_t c = 0; c < p.kv_lora; ++c) q_i[c * L.hp + h] = tmp[i * p.kv_lora + c] * p.kq_scale;
        for (int64_t d = 0; d < p.qk_rope; ++d) q_i[(p.kv_lora + d) * L.hp + h] = pe[d] * p.kq_scale;
      }
    }
  });
}

// Softmax pieces per head lane of one split's nr scores: the split's max, p = exp(s - max) in
// place, Σ p in row order.
void split_softmax(float* scores, int64_t lanes, int64_t nr, float* m, float* l) {
  for (int64_t v = 0; v < lanes; v += simd::kLanesN) {
    f32xn mx = simd::load_n(scores + v);
    for (int64_t r = 1; r < nr; ++r) mx = simd::max_n(mx, simd::load_n(scores + r * lanes + v));
    f32xn sum{};
    for (int64_t r = 0; r < nr; ++r) {
      float* s = scores + r * lanes + v;
      const f32xn e = simd::exp_n_nonpos(simd::load_n(s) - mx);
      simd::store_n(s, e);
      sum += e;
    }
    simd::store_n(m + v, mx);
    simd::store_n(l + v, sum);
  }
}

// One unit (query, part, head group): the part's splits scored, softmaxed and summed, folded in
// order into the part's (max, sum, output) for the group's lanes.
void attend_unit(const MlaAttnParams& p, DequantizeFn dq, const Layout& L, const QueryBlock& B, int64_t u,
                 const ThreadBuffers& tb) {
  const int64_t g = u % B.n_groups, part_index = u / B.n_groups;
  const int64_t i = B.query_of(part_index);
  const int64_t part = part_index - B.part_base[i];
  const attn::QueryRows rows = attn::rows_of(p, B.qb + i);
  const int64_t v0 = g * L.n_hvec / B.n_groups, v1 = (g + 1) * L.n_hvec / B.n_groups;
  const int64_t nv = v1 - v0, lanes = nv * 16;
  const float* q_i = B.qt + i * L.row_len * L.hp + v0 * 16;
  float* dst = B.parts + part_index * L.part_floats;
  float* dm = dst + v0 * 16;
  float* dl = dst + L.hp + v0 * 16;
  float* d_o = dst + 2 * L.hp + v0 * 16 * L.kvp;
  const int64_t k0 = part * kPartRows, k1 = std::min(rows.n, k0 + kPartRows);
  for (int64_t s0 = k0; s0 < k1; s0 += kSplit) {
    const int64_t nr = std::min(kSplit, k1 - s0);
    for (int64_t r = 0; r < nr; ++r) {
      if (s0 + r + kPrefetchRows < k1) attn::prefetch_row(p, rows[s0 + r + kPrefetchRows]);
      attn::load_row(p, dq, rows[s0 + r], tb.tile + r * L.ld);
    }
    simd::dot_rows(tb.tile, L.ld, nr, q_i, L.hp, nv, L.row_len, tb.scores, lanes);
    split_softmax(tb.scores, lanes, nr, tb.m, tb.l);
    // Σ_j p_j c_kv_j per head: the c_kv part of each row, in row order.
    const bool first = s0 == k0;
    simd::weighted_rows(tb.scores, lanes, lanes, tb.tile, L.ld, L.kvp / 16, nr, first ? d_o : tb.o, L.kvp);
    if (first) {
      std::memcpy(dm, tb.m, sizeof(float) * lanes);
      std::memcpy(dl, tb.l, sizeof(float) * lanes);
    } else {
      for (int64_t v = 0; v < nv; ++v)
        fold16(dm + v * 16, dl + v * 16, d_o + v * 16 * L.kvp, tb.m + v * 16, tb.l + v * 16, tb.o + v * 16 * L.kvp,
               L.kvp, L.kvp, L.kvp);
    }
  }
}

// 2. Attend: unit = (query, part, head group). Each thread takes a contiguous run of units holding
//    a near-equal share of the rows: a query's last part is usually short (4,160 rows are 4 parts
//    of 1,024 and one of 64, which an equal split of the unit count gives two threads as 3,072 and
//    1,088 rows). Unit u goes to the thread whose share holds the middle of its rows. Who runs a
//    unit never changes its arithmetic.
void attend(const MlaAttnParams& p, const Layout& L, const QueryBlock& B, ThreadPool& pool, AttnScratch& scratch) {
  const DequantizeFn dq = p.cache_type == GgmlType::F32 ? nullptr : dequantize_fn(p.cache_type);
  const int nt = pool.n_threads();
  const int64_t n_units = B.part_base[B.nq] * B.n_groups;
  auto unit_rows = [&](int64_t u) {
    const int64_t part_index = u / B.n_groups;
    const int64_t i = B.query_of(part_index);
    const int64_t k0 = (part_index - B.part_base[i]) * kPartRows;
    return std::min(attn::rows_of(p, B.qb + i).n, k0 + kPartRows) - k0;
  };
  int64_t total_rows = 0;
  for (int64_t u = 0; u < n_units; ++u) total_rows += unit_rows(u);
  if (n_units == 0) return;
  pool.run([&](int t) {
    int64_t before = 0, u0 = n_units, u1 = n_units;
    for (int64_t u = 0; u < n_units; ++u) {
      const int64_t w = unit_rows(u);
      const int64_t owner = std::min<int64_t>(nt - 1, (2 * before + w) * nt / (2 * total_rows));
      if (owner == t && u0 == n_units) u0 = u;
      if (owner > t) {
        u1 = u;
        break;
      }
      before += w;
    }
    const ThreadBuffers tb = thread_buffers(p, L, scratch, t);
    for (int64_t u = u0; u < u1; ++u) attend_unit(p, dq, L, B, u, tb);
  });
}

// 3. Fold each query's parts in order into its first, normalize, and un-absorb:
//    out[i][h][e] = Σ_c W_UV[h][e][c] o_lat[i][h][c].
void fold_and_unabsorb(const MlaAttnParams& p, const Layout& L, const QueryBlock& B, ThreadPool& pool,
                       AttnScratch& scratch) {
  pool.parallel_for(B.nq * L.n_hvec, [&](int64_t w0, int64_t w1, int) {
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t i = w / L.n_hvec, v = w % L.n_hvec;
      float* first = B.parts + B.part_base[i] * L.part_floats;
      for (int64_t k = B.part_base[i] + 1; k < B.part_base[i + 1]; ++k) {
        const float* other = B.parts + k * L.part_floats;
        fold16(first + v * 16, first + L.hp + v * 16, first + 2 * L.hp + v * 16 * L.kvp, other + v * 16,
               other + L.hp + v * 16, other + 2 * L.hp + v * 16 * L.kvp, L.kvp, L.kvp, L.kvp);
      }
      for (int64_t h = v * 16; h < std::min<int64_t>(p.n_head, v * 16 + 16); ++h) {
        const f32xn inv = simd::splat_n(1.0f / first[L.hp + h]);
        float* o = first + 2 * L.hp + h * L.kvp;
        for (int64_t c = 0; c < L.kvp; c += simd::kLanesN) simd::store_n(o + c, simd::load_n(o + c) * inv);
      }
    }
  });
  pool.parallel_for(p.n_head, [&](int64_t h0, int64_t h1, int t) {
    for (int64_t h = h0; h < h1; ++h) {
      const float* wv = mla_proj_head(p.w_uv, h, p.v_dim, p.kv_lora, scratch.heads[t].data());
      dot_block_f32(
          B.nq, p.v_dim, p.kv_lora,
          [&](int64_t i) { return B.parts + B.part_base[i] * L.part_floats + 2 * L.hp + h * L.kvp; },
          [&](int64_t e) { return wv + e * p.kv_lora; }, p.out + B.qb * p.out_stride + h * p.v_dim, p.out_stride);
    }
  });
}

}  // namespace

void mla_attention_mqa(const MlaAttnParams& p, ThreadPool& pool, AttnScratch& scratch) {
  const Layout L(p);
  const int nt = pool.n_threads();
  attn::Carve<float> size;
  thread_buffers(p, L, size);
  if (static_cast<int>(scratch.per_thread.size()) < nt) scratch.per_thread.resize(nt);
  for (int t = 0; t < nt; ++t)
    if (scratch.per_thread[t].size() < static_cast<size_t>(size.used()))
      scratch.per_thread[t].resize(static_cast<size_t>(size.used()));
  // One head's W_UK or W_UV rows as F32 when the projection is not F32 already.
  attn::reserve_head_buffers(scratch, nt, static_cast<size_t>(std::max(p.qk_nope, p.v_dim) * p.kv_lora));

  for (int64_t qb = 0; qb < p.n_q; qb += kQueryBlock) {
    QueryBlock B;
    B.qb = qb;
    B.nq = std::min(kQueryBlock, p.n_q - qb);
    B.part_base[0] = 0;
    for (int64_t i = 0; i < B.nq; ++i)
      B.part_base[i + 1] = B.part_base[i] + (attn::rows_of(p, qb + i).n + kPartRows - 1) / kPartRows;
    const int64_t n_parts = B.part_base[B.nq];
    // Head groups: enough (query, part, group) units for every thread. The group count only
    // changes who computes which lanes.
    B.n_groups = std::clamp<int64_t>((nt + n_parts - 1) / n_parts, 1, L.n_hvec);
    const size_t qt_floats = static_cast<size_t>(B.nq * L.row_len * L.hp);
    if (scratch.q_t.size() < qt_floats) scratch.q_t.assign(qt_floats, 0.0f);
    const size_t part_floats = static_cast<size_t>(n_parts * L.part_floats);
    if (scratch.partials.size() < part_floats) scratch.partials.resize(part_floats);
    B.qt = scratch.q_t.data();
    B.parts = scratch.partials.data();
    absorb(p, L, B, pool, scratch);
    attend(p, L, B, pool, scratch);
    fold_and_unabsorb(p, L, B, pool, scratch);
  }
}

}  // namespace mla
