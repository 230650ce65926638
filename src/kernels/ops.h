#pragma once
// Element-wise and row ops of the forward pass, each with a scalar `_ref` twin (double
// accumulation, plain loops) that tests/kernels compares against.
#include <cstdint>

namespace mla {

// RMSNorm of one row: y[i] = x[i] / sqrt(mean(x²) + eps) * w[i]. n elements; y may alias x.
void rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps);
void rmsnorm_ref(const float* x, const float* w, float* y, int64_t n, float eps);

// LayerNorm of one row: y[i] = (x[i] - mean) / sqrt(var + eps) * w[i] + b[i]. y may alias x.
void layernorm(const float* x, const float* w, const float* b, float* y, int64_t n, float eps);
void layernorm_ref(const float* x, const float* w, const float* b, float* y, int64_t n, float eps);

// In-place softmax of one row of n > 0 values (max-subtracted).
void softmax(float* x, int64_t n);
void softmax_ref(float* x, int64_t n);

// SwiGLU: y[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)). y may alias gate or up.
void swiglu(const float* gate, const float* up, float* y, int64_t n);
void swiglu_ref(const float* gate, const float* up, float* y, int64_t n);

// y[i] += x[i]
void add_inplace(float* y, const float* x, int64_t n);

}  // namespace mla
