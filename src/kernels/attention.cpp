#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention_rows.h"
#include "kernels/ops.h"
#include "kernels/vec.h"

namespace mla {
namespace {

float* thread_buffer(AttnScratch& s, int n_threads, int t, size_t n_floats) {
  if (static_cast<int>(s.per_thread.size()) < n_threads) s.per_thread.resize(n_threads);
  auto& v = s.per_thread[t];
  if (v.size() < n_floats) v.resize(n_floats);
  return v.data();
}

using attn::QueryRows;
using attn::rows_of;

// A row of the context for the reference kernels, by the quant library's dequantization.
std::vector<float> ref_row(const MlaAttnParams& p, int64_t j) {
  std::vector<float> r(p.kv_lora + p.qk_rope);
  dequantize_row(p.cache_type, attn::raw_row(p, j), r.data(), p.kv_lora + p.qk_rope);
  return r;
}

}  // namespace

const float* mla_proj_head(const MlaProj& w, int64_t h, int64_t rows, int64_t cols, float* buf) {
  const int64_t f32_row = cols * static_cast<int64_t>(sizeof(float));
  const int64_t rb = w.row_bytes ? w.row_bytes : f32_row;
  const int64_t hr = w.head_rows ? w.head_rows : rows;
  const uint8_t* base = static_cast<const uint8_t*>(w.data) + h * hr * rb;
  if (w.type == GgmlType::F32 && rb == f32_row) return reinterpret_cast<const float*>(base);
  const DequantizeFn dq = w.type == GgmlType::F32 ? nullptr : dequantize_fn(w.type);
  for (int64_t r = 0; r < rows; ++r) {
    if (dq)
      dq(base + r * rb, buf + r * cols, cols);
    else
      std::memcpy(buf + r * cols, base + r * rb, f32_row);
  }
  return buf;
}

void mla_attention_mha(const MlaAttnParams& p, ThreadPool& pool, AttnScratch& scratch) {
  // The context as F32 rows: the cache itself when it is F32, else converted once here.
  const int64_t row_len = p.kv_lora + p.qk_rope;
  const float* ctx_base = static_cast<const float*>(p.cache);
  int64_t ctx_stride = p.cache_row_bytes / static_cast<int64_t>(sizeof(float));
  const int32_t* ctx_slots = p.slots;
  if (p.cache_type != GgmlType::F32) {
    if (scratch.ctx.size() < static_cast<size_t>(p.n_ctx * row_len)) scratch.ctx.resize(p.n_ctx * row_len);
    if (scratch.iota.size() < static_cast<size_t>(p.n_ctx)) {
      const auto have = static_cast<int32_t>(scratch.iota.size());
      scratch.iota.resize(p.n_ctx);
      for (auto j = have; j < static_cast<int32_t>(p.n_ctx); ++j) scratch.iota[j] = j;
    }
    const DequantizeFn dq = dequantize_fn(p.cache_type);
    pool.parallel_for(p.n_ctx, [&](int64_t j0, int64_t j1, int) {
      for (int64_t j = j0; j < j1; ++j) attn::load_row(p, dq, j, scratch.ctx.data() + j * row_len);
    });
    ctx_base = scratch.ctx.data();
    ctx_stride = row_len;
    ctx_slots = scratch.iota.data();
  }
  auto ctx_row = [&](int64_t j) { return ctx_base + ctx_slots[j] * ctx_stride; };
  const int64_t qk_head = p.qk_nope + p.qk_rope;
  // Grow every thread's buffer up front: resizing inside the parallel region would race on
  // the outer vector.
  const size_t need = static_cast<size_t>(p.n_ctx * (qk_head + p.v_dim + 2));
  for (int t = 0; t < pool.n_threads(); ++t) thread_buffer(scratch, pool.n_threads(), t, need);
  // One head's W_UK and W_UV rows as F32 when the projections are not F32 already.
  const size_t head_floats = static_cast<size_t>((p.qk_nope + p.v_dim) * p.kv_lora);
  attn::reserve_head_buffers(scratch, pool.n_threads(), head_floats);
  pool.parallel_for(p.n_head, [&](int64_t h0, int64_t h1, int t) {
    float* k = scratch.per_thread[t].data();  // [n_ctx][qk_nope | qk_rope]
    float* v = k + p.n_ctx * qk_head;         // [n_ctx][v_dim]
    float* scores = v + p.n_ctx * p.v_dim;    // [2][n_ctx]

    auto key = [&](int64_t j) -> const float* { return k + j * qk_head; };
    float* wbuf = scratch.heads[t].data();
    for (int64_t h = h0; h < h1; ++h) {
      const float* wk = mla_proj_head(p.w_uk_t, h, p.qk_nope, p.kv_lora, wbuf);
      const float* wv = mla_proj_head(p.w_uv, h, p.v_dim, p.kv_lora, wbuf + p.qk_nope * p.kv_lora);
      // Decompress the context for this head: k_nope_j = W_UK_h c_j, v_j = W_UV_h c_j; k_pe as is.
      dot_block_f32(
          p.n_ctx, p.qk_nope, p.kv_lora, ctx_row, [&](int64_t d) { return wk + d * p.kv_lora; }, k, qk_head);
      dot_block_f32(
          p.n_ctx, p.v_dim, p.kv_lora, ctx_row, [&](int64_t e) { return wv + e * p.kv_lora; }, v, p.v_dim);
      for (int64_t j = 0; j < p.n_ctx; ++j)
        std::memcpy(k + j * qk_head + p.qk_nope, ctx_row(j) + p.kv_lora, sizeof(float) * p.qk_rope);
      if (p.sel) {
        // Sparse: each query over its own selected keys.
        for (int64_t i = 0; i < p.n_q; ++i) {
          const QueryRows rows = rows_of(p, i);
          const float* qh = p.q + i * p.q_stride + h * qk_head;
          dot_block_f32(
              1, rows.n, qk_head, [&](int64_t) { return qh; }, [&](int64_t k) { return key(rows[k]); }, scores, 0);
          for (int64_t k = 0; k < rows.n; ++k) scores[k] *= p.kq_scale;
          softmax(scores, rows.n);
          float* o = p.out + i * p.out_stride + h * p.v_dim;
          std::memset(o, 0, sizeof(float) * p.v_dim);
          for (int64_t k = 0; k < rows.n; ++k) axpy_f32(scores[k], v + rows[k] * p.v_dim, o, p.v_dim);
        }
        continue;
      }
      // Queries two at a time over the keys both see; the second also sees one more.
      for (int64_t i = 0; i < p.n_q; i += 2) {
        const int64_t nq = std::min<int64_t>(2, p.n_q - i);
        const int64_t n_vis = p.n_ctx - p.n_q + i + 1;  // of query i; query i + 1 sees n_vis + 1
        auto query = [&](int64_t r) { return p.q + (i + r) * p.q_stride + h * qk_head; };
        dot_block_f32(nq, n_vis, qk_head, query, key, scores, p.n_ctx);
        if (nq == 2)
          dot_block_f32(
              1, 1, qk_head, [&](int64_t) { return query(1); }, [&](int64_t) { return key(n_vis); },
              scores + p.n_ctx + n_vis, p.n_ctx);
        for (int64_t r = 0; r < nq; ++r) {
          float* sc = scores + r * p.n_ctx;
          const int64_t n = n_vis + r;
          for (int64_t j = 0; j < n; ++j) sc[j] *= p.kq_scale;
          softmax(sc, n);
          float* o = p.out + (i + r) * p.out_stride + h * p.v_dim;
          std::memset(o, 0, sizeof(float) * p.v_dim);
          for (int64_t j = 0; j < n; ++j) axpy_f32(sc[j], v + j * p.v_dim, o, p.v_dim);
        }
      }
    }
  });
}

void mla_attention_mha_ref(const MlaAttnParams& p) {
  const int64_t qk_head = p.qk_nope + p.qk_rope;
  std::vector<double> k(p.n_ctx * qk_head), v(p.n_ctx * p.v_dim), w(p.n_ctx);
  std::vector<float> uk_buf(p.qk_nope * p.kv_lora), uv_buf(p.v_dim * p.kv_lora);
  for (int64_t h = 0; h < p.n_head; ++h) {
    const float* uk = mla_proj_head(p.w_uk_t, h, p.qk_nope, p.kv_lora, uk_buf.data());  // [qk_nope][kv_lora]
    const float* uv = mla_proj_head(p.w_uv, h, p.v_dim, p.kv_lora, uv_buf.data());      // [v_dim][kv_lora]
    for (int64_t j = 0; j < p.n_ctx; ++j) {
      const std::vector<float> row = ref_row(p, j);
      const float* c = row.data();
      for (int64_t d = 0; d < p.qk_nope; ++d) k[j * qk_head + d] = dot_f64(uk + d * p.kv_lora, c, p.kv_lora);
      for (int64_t d = 0; d < p.qk_rope; ++d) k[j * qk_head + p.qk_nope + d] = c[p.kv_lora + d];
      for (int64_t e = 0; e < p.v_dim; ++e) v[j * p.v_dim + e] = dot_f64(uv + e * p.kv_lora, c, p.kv_lora);
    }
    for (int64_t i = 0; i < p.n_q; ++i) {
      const QueryRows rows = rows_of(p, i);
      const float* qh = p.q + i * p.q_stride + h * qk_head;
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < rows.n; ++j) {
        double s = 0;
        for (int64_t d = 0; d < qk_head; ++d) s += qh[d] * k[rows[j] * qk_head + d];
        w[j] = s * p.kq_scale;
        mx = std::max(mx, w[j]);
      }
      for (int64_t j = 0; j < rows.n; ++j) sum += (w[j] = std::exp(w[j] - mx));
      float* o = p.out + i * p.out_stride + h * p.v_dim;
      for (int64_t e = 0; e < p.v_dim; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < rows.n; ++j) acc += w[j] / sum * v[rows[j] * p.v_dim + e];
        o[e] = static_cast<float>(acc);
      }
    }
  }
}

void mla_attention_mqa_ref(const MlaAttnParams& p) {
  const int64_t qk_head = p.qk_nope + p.qk_rope;
  std::vector<double> q_lat(p.kv_lora), o_lat(p.kv_lora), w(p.n_ctx);
  std::vector<float> uk_buf(p.kv_lora * p.qk_nope), uv_buf(p.v_dim * p.kv_lora);
  for (int64_t h = 0; h < p.n_head; ++h) {
    const float* uk = mla_proj_head(p.w_uk, h, p.kv_lora, p.qk_nope, uk_buf.data());  // [kv_lora][qk_nope]
    const float* uv = mla_proj_head(p.w_uv, h, p.v_dim, p.kv_lora, uv_buf.data());    // [v_dim][kv_lora]
    for (int64_t i = 0; i < p.n_q; ++i) {
      const QueryRows rows = rows_of(p, i);
      const int64_t n_vis = rows.n;
      const float* qh = p.q + i * p.q_stride + h * qk_head;
      for (int64_t c = 0; c < p.kv_lora; ++c) q_lat[c] = dot_f64(uk + c * p.qk_nope, qh, p.qk_nope);
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < n_vis; ++j) {
        const std::vector<float> row = ref_row(p, rows[j]);
        double s = 0;
        for (int64_t c = 0; c < p.kv_lora; ++c) s += q_lat[c] * row[c];
        for (int64_t d = 0; d < p.qk_rope; ++d) s += static_cast<double>(qh[p.qk_nope + d]) * row[p.kv_lora + d];
        w[j] = s * p.kq_scale;
        mx = std::max(mx, w[j]);
      }
      for (int64_t j = 0; j < n_vis; ++j) sum += (w[j] = std::exp(w[j] - mx));
      std::fill(o_lat.begin(), o_lat.end(), 0.0);
      for (int64_t j = 0; j < n_vis; ++j) {
        const std::vector<float> row = ref_row(p, rows[j]);
        for (int64_t c = 0; c < p.kv_lora; ++c) o_lat[c] += w[j] / sum * row[c];
      }
      float* o = p.out + i * p.out_stride + h * p.v_dim;
      for (int64_t e = 0; e < p.v_dim; ++e) {
        const float* wv = uv + e * p.kv_lora;
        double acc = 0;
        for (int64_t c = 0; c < p.kv_lora; ++c) acc += wv[c] * o_lat[c];
        o[e] = static_cast<float>(acc);
      }
    }
  }
}

}  // namespace mla
