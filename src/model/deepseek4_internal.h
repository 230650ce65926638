#pragma once
// Row helpers shared by the deepseek4 forward files (deepseek4.cpp, deepseek4_attention.cpp).
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/rope.h"
#include "model/deepseek4_config.h"

namespace mla::ds4 {

// y = x / sqrt(mean(x²) + eps) (* w when w is not null); y may alias x. Double accumulation.
inline void rms(const float* x, const float* w, float* y, int64_t n, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * (w ? w[i] : 1.0f);
}

// Rotates the last p.n_dims values of n_rows vectors of `dim` floats (x + r * dim) to position
// pos, interleaved pairs; inverse rotates by -pos (the attention output's un-rotation).
inline void rope_tail(const RopeParams& p, int64_t pos, float* x, int64_t n_rows, int64_t dim, bool inverse = false) {
  std::vector<float> cs(static_cast<size_t>(p.n_dims));
  float* cos_v = cs.data();
  float* sin_v = cs.data() + p.n_dims / 2;
  rope_cos_sin(p, pos, cos_v, sin_v);
  if (inverse)
    for (int i = 0; i < p.n_dims / 2; ++i) sin_v[i] = -sin_v[i];
  rope_apply(x + (dim - p.n_dims), n_rows, dim, p.n_dims, cos_v, sin_v);
}

// `--trace dispatch:N` at layer il's attention branch (util/trace.h, trace_ds4_dispatch): the chunk
// pos0 .. pos0 + n_tok - 1 read window_rows window rows and sees n_entries compressed entries;
// n_selected[t] (CSA through the indexer) the entries query t attends to, empty when every
// visible entry is attended (HCA, dense CSA). Returns at once when tracing is off.
void trace_attention(const Deepseek4Config& c, int64_t il, int64_t pos0, int64_t n_tok, int64_t window_rows,
                     int64_t n_entries, const std::vector<int32_t>& n_selected);

}  // namespace mla::ds4
