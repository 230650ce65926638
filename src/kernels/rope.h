#pragma once
// Rotary position embedding in llama.cpp's NORM style: adjacent pairs (x[2i], x[2i+1]) rotate by
// theta_i = pos * freq_base^(-2i/n_dims), with YaRN frequency blending between interpolation
// (theta * freq_scale) and extrapolation (theta) over the ramp [corr_dims[0], corr_dims[1]].
//
// This equals transformers' DeepseekV3 `apply_rotary_pos_emb_interleave` (rope_interleave=True):
// that de-interleaves the pairs, rotates halves and leaves them de-interleaved, the same
// permutation on q and k, so every q·k product is the same.
#include <cstdint>

namespace mla {

struct RopeParams {
  int n_dims = 0;            // rotated dims per head (qk_rope_head_dim), even
  double freq_base = 10000;  // rope.freq_base
  double freq_scale = 1;     // 1 / rope.scaling.factor (1: no scaling)
  double ext_factor = 0;     // YaRN extrapolation mix: 1 for yarn, 0 for none/linear
  double attn_factor = 1;    // amplitude applied to cos and sin (transformers' attention_scaling)
  double beta_fast = 32;     // YaRN ramp ends, in rotations over the original context
  double beta_slow = 1;
  int64_t n_ctx_orig = 0;  // rope.scaling.original_context_length
};

// YaRN ramp ends in pair-index units [low, high] as ggml_rope_yarn_corr_dims and transformers'
// find_correction_range (floor/ceil, clamped to [0, n_dims - 1]).
void rope_yarn_corr_dims(const RopeParams& p, double dims[2]);

// cos/sin of every pair at position pos (already multiplied by attn_factor): n_dims/2 each.
void rope_cos_sin(const RopeParams& p, int64_t pos, float* cos_out, float* sin_out);

// Rotates the first n_dims values of n_rows vectors x + r * stride with a cos/sin row from
// rope_cos_sin.
void rope_apply(float* x, int64_t n_rows, int64_t stride, int n_dims, const float* cos_v, const float* sin_v);

// The same rotation in NEOX layout: pair i is (x[i], x[i + n_dims/2]) (transformers' rotate_half).
void rope_apply_neox(float* x, int64_t n_rows, int64_t stride, int n_dims, const float* cos_v, const float* sin_v);

// Reference: recomputes every angle from the definition for one vector.
void rope_ref(const RopeParams& p, int64_t pos, float* x);

}  // namespace mla
