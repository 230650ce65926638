#pragma once
// Internal to the exact MLA attention kernels (attention_mqa_exact.cpp, attention_mha_exact.cpp):
// both paths in double from the same F32 inputs, rounded to F32 once.
//
// Why: the two paths are the same function of their inputs, but F32 kernels associate its sums
// differently (q·(W_UK c) against (W_UKᵀ q)·c, Σ p (W_UV c) against W_UV (Σ p c)), so their
// outputs differ by an ulp or two. The next matmul quantizes that output (Q8_0 / Q8_K, 127
// levels per block): a value within an ulp of a rounding boundary lands on different levels,
// which moves the layer's output by ~1e-3 relative and every later layer with it. On V2-Lite
// widths one such flip per layer is the norm, so the paths' logits part by 1e-2.
//
// Here every product of two F32 values is exact in double, and every sum, exp and fold runs in
// double (relative error ~1e-15 against the exact real result). The output is that result
// rounded to F32: the same float on both paths unless the exact value lies within ~1e-15 of a
// rounding midpoint (about one output in 10^8). The paths, prefill chunking and the build
// target (scalar, AVX2, AVX-512) then give the same bits, and so do the activations quantized
// downstream. A query's arithmetic depends only on its own rows: not on threads, other queries
// or how its prompt was chunked.
#include <cstddef>
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/attention_rows.h"

namespace mla::exact {

using Carve = attn::Carve<double>;  // a thread's double buffer, laid out once (attention_rows.h)

// Grows every thread's double buffer (AttnScratch::exact_per_thread) to n values; before a
// parallel region, where resizing would race. Inside it, thread t uses exact_per_thread[t].data().
void reserve_thread_buffers(AttnScratch& s, int n_threads, size_t n);

// ---- W_UK / W_UV dotted from their stored rows (attention_exact_proj.cpp) ----

// Room (in floats) proj_dots needs in buf for `rows` rows of `cols` elements.
int64_t proj_buffer_floats(int64_t rows, int64_t cols);

// out[i][r] = Σ_k a[i][k] · W_h[r][k] in double for nq vectors a (lda apart) and head h's `rows`
// rows of `cols` elements (out rows ldo apart). Q8_0 / Q6_K rows are dotted from their integer
// levels and scales, other types through the head's F32 copy in buf (proj_buffer_floats).
void proj_dots(const MlaProj& w, int64_t h, int64_t rows, int64_t cols, int64_t nq, const double* a, int64_t lda,
               double* out, int64_t ldo, float* buf);

}  // namespace mla::exact
