#include "kernels/matmul.h"

#include <algorithm>

#include "quant/quant.h"
#include "util/error.h"

namespace mla {
namespace {

// Quantizes n_tok activation rows to `act_type`, one row per token, row_bytes apart. F32 rows
// are used in place (returns x); otherwise returns the scratch buffer.
const uint8_t* prepare_activations(GgmlType act_type, const float* x, int64_t x_stride, int64_t n_tok, int64_t n_cols,
                                   int64_t& act_row_bytes, ThreadPool* pool, std::vector<uint8_t>& buf) {
  if (act_type == GgmlType::F32) {
    act_row_bytes = x_stride * static_cast<int64_t>(sizeof(float));
    return reinterpret_cast<const uint8_t*>(x);
  }
  act_row_bytes = ggml_row_bytes(act_type, n_cols);
  size_t need = static_cast<size_t>(act_row_bytes * n_tok);
  if (buf.size() < need) buf.resize(need);
  uint8_t* out = buf.data();
  QuantizeFn q = quantize_fn(act_type);
  auto body = [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) q(x + t * x_stride, out + t * act_row_bytes, n_cols);
  };
  if (pool)
    pool->parallel_for(n_tok, body);
  else
    body(0, n_tok, 0);
  return out;
}

}  // namespace

bool matmul_supports(GgmlType t) {
  if (!can_dequantize(t)) return false;
  try {
    GgmlType a = vec_dot_type(t);
    return (a == GgmlType::F32 || can_quantize(a)) && vec_dot_fn(t) != nullptr;
  } catch (const Error&) {
    return false;
  }
}

QuantizedActivations quantize_activations(GgmlType weight_type, const float* x, int64_t x_stride, int64_t n_tok,
                                          int64_t n_cols, ThreadPool* pool, std::vector<uint8_t>& buf) {
  QuantizedActivations q;
  q.data = prepare_activations(vec_dot_type(weight_type), x, x_stride, n_tok, n_cols, q.row_bytes, pool, buf);
  return q;
}

void matmul_rows(const WeightMatrix& w, const QuantizedActivations& act, int64_t n_tok, float* y, int64_t y_stride,
                 int64_t r0, int64_t r1) {
  const VecDotFn dot = vec_dot_fn(w.type);
  const VecDot4Fn dot4 = n_tok >= 4 ? vec_dot4_fn(w.type) : nullptr;  // same results, fewer weight loads
  const int64_t rb = act.row_bytes;
  // Token tiles small enough to stay in L2 while each weight row of the tile is streamed once.
  const int64_t tile = std::clamp<int64_t>((256 * 1024) / std::max<int64_t>(rb, 1), 1, 64);
  const int64_t n_cols = w.n_cols;
  for (int64_t t0 = 0; t0 < n_tok; t0 += tile) {
    const int64_t t1 = std::min(n_tok, t0 + tile);
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* wr = w.row(r);
      int64_t t = t0;
      if (dot4)
        for (float out[4]; t + 4 <= t1; t += 4) {
          dot4(n_cols, wr, act.data + t * rb, rb, out);
          for (int k = 0; k < 4; ++k) y[(t + k) * y_stride + r] = out[k];
        }
      for (; t < t1; ++t) y[t * y_stride + r] = dot(n_cols, wr, act.data + t * rb);
    }
  }
}

void matmul(const WeightMatrix& w, const float* x, int64_t x_stride, int64_t n_tok, float* y, int64_t y_stride,
            ThreadPool& pool, MatmulScratch& scratch) {
  if (n_tok <= 0 || w.n_rows <= 0) return;
  const QuantizedActivations act = quantize_activations(w.type, x, x_stride, n_tok, w.n_cols, &pool, scratch.act);
  pool.parallel_for(w.n_rows, [&](int64_t r0, int64_t r1, int) { matmul_rows(w, act, n_tok, y, y_stride, r0, r1); });
}

void matmul_ref(const WeightMatrix& w, const float* x, int64_t x_stride, int64_t n_tok, float* y, int64_t y_stride) {
  const GgmlType act_type = vec_dot_type(w.type);
  std::vector<uint8_t> own;
  int64_t act_row_bytes = 0;
  const uint8_t* act = prepare_activations(act_type, x, x_stride, n_tok, w.n_cols, act_row_bytes, nullptr, own);
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t r = 0; r < w.n_rows; ++r)
      y[t * y_stride + r] = vec_dot_ref(w.type, w.n_cols, w.row(r), act + t * act_row_bytes);
}

}  // namespace mla
