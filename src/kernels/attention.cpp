#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention_rows.h"
#include "kernels/ops.h"
#include "kernels/vec.h"

namespace mla {
namespace {

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
