#pragma once
// MoE routing of one token: expert scores from router logits, group-limited top-k selection and
// the selected experts' mixing weights, as transformers' DeepseekV3TopkRouter (sigmoid) and
// llama.cpp's build_moe_ffn (softmax or sigmoid) compute them.
#include <cstdint>

namespace mla {

enum class MoeGating { Softmax = 1, Sigmoid = 2 };  // values as GGUF expert_gating_func

struct MoeRouting {
  int n_expert = 0;
  int n_expert_used = 0;  // top-k
  int n_group = 1;        // expert_group_count (1: no group limit)
  int n_group_used = 1;   // expert_group_used_count
  MoeGating gating = MoeGating::Softmax;
  bool norm_weights = false;    // expert_weights_norm: divide the k weights by their sum
  float weights_scale = 1;      // expert_weights_scale (routed_scaling_factor)
  const float* bias = nullptr;  // exp_probs_b [n_expert] (e_score_correction_bias), selection only; may be nullptr
};

// Steps: scores = softmax or sigmoid of logits; choice = scores + bias; when n_group > 1 each
// group is scored by the sum of its top-2 choice values, the best n_group_used groups are kept
// and the other groups' experts are excluded (choice = -inf, as DeepSeek's reference code,
// transformers 5.x and llama.cpp do; transformers 4.57 masks with 0.0, which differs only when
// a kept choice value is negative); the top n_expert_used choice values pick the experts
// (ties: lower index first); weights are the picked experts' scores (without bias), divided by
// their sum if norm_weights, times weights_scale.
//
// experts[k] / weights[k] come out sorted by expert index (the order transformers sums them).
// scratch holds at least 2 * n_expert + n_group floats.
void moe_route(const MoeRouting& r, const float* logits, int32_t* experts, float* weights, float* scratch);

// Reference: full sorts, double precision.
void moe_route_ref(const MoeRouting& r, const float* logits, int32_t* experts, float* weights);

}  // namespace mla
