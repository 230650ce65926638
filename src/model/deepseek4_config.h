#pragma once
// Hyper-parameters of DeepSeek-V4 (`deepseek4`): one flat struct filled once from the
// `deepseek4.*` metadata (llama.cpp's converter names; docs/DEEPSEEK-V4.md §2), validated, with
// the per-layer schedule (attention kind, hash routing, SwiGLU limits) and both RoPE settings
// derived here and nowhere else.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/rope.h"

namespace mla {

class GgufFile;

// A layer's attention: the sliding window alone, or beside compressed entries of m tokens each
// (CSA: m = 4, overlapping windows, lightning-indexer top-k; HCA: m = 128, every visible entry).
enum class Ds4Attn { Sliding, Csa, Hca };
const char* ds4_attn_name(Ds4Attn a);

inline constexpr int64_t kDs4CsaRatio = 4;
inline constexpr int64_t kDs4HcaRatio = 128;
inline constexpr int64_t kDs4GatingSqrtSoftplus = 4;  // expert_gating_func: llama.cpp's enum value

struct Deepseek4Config {
  // ---- as stored (under `deepseek4.`) ----
  int64_t n_layer_all = 0;          // block_count
  int64_t n_nextn = 0;              // nextn_predict_layers (MTP; not run here)
  int64_t n_ctx_train = 0;          // context_length
  int64_t n_embd = 0;               // embedding_length (D)
  int64_t n_head = 0;               // attention.head_count (H)
  int64_t head_dim = 0;             // attention.key_length (d): one shared K=V head of d
  double rms_eps = 0;               // attention.layer_norm_rms_epsilon
  int64_t q_lora_rank = 0;          // attention.q_lora_rank
  int64_t n_window = 0;             // attention.sliding_window (W tokens, the query's own included)
  int64_t o_groups = 0;             // attention.output_group_count
  int64_t o_lora_rank = 0;          // attention.output_lora_rank
  double compress_rope_base = 0;    // attention.compress_rope_freq_base
  int64_t n_indexer_head = 0;       // attention.indexer.head_count (CSA files)
  int64_t indexer_head_dim = 0;     // attention.indexer.key_length
  int64_t indexer_top_k = 0;        // attention.indexer.top_k
  int64_t n_rot = 0;                // rope.dimension_count: the last n_rot dims of a head rotate
  double rope_freq_base = 10000;    // rope.freq_base (sliding-only layers)
  std::string rope_scaling_type;    // rope.scaling.type: "", none or yarn (compressed layers only)
  double rope_scaling_factor = 1;   // rope.scaling.factor
  int64_t rope_orig_ctx = 0;        // rope.scaling.original_context_length
  double rope_yarn_beta_fast = 32;  // rope.scaling.yarn_beta_fast
  double rope_yarn_beta_slow = 1;   // rope.scaling.yarn_beta_slow
  int64_t n_expert = 0;             // expert_count
  int64_t n_expert_used = 0;        // expert_used_count (k)
  int64_t n_expert_shared = 0;      // expert_shared_count
  int64_t n_ff_exp = 0;             // expert_feed_forward_length
  double expert_weights_scale = 1;  // expert_weights_scale (routed_scaling_factor)
  int64_t expert_gating_func = 0;   // expert_gating_func: must be 4 (sqrtsoftplus)
  int64_t n_hash_layers = 0;        // hash_layer_count: the first N layers route by token id
  int64_t hc_mult = 0;              // hyper_connection.count (residual streams)
  int64_t hc_sinkhorn_iters = 0;    // hyper_connection.sinkhorn_iterations
  double hc_eps = 0;                // hyper_connection.epsilon
  int64_t n_vocab = 0;              // vocab_size, else token_embd rows

  // ---- derived ----
  int64_t n_layer = 0;                     // trunk layers (block_count less a stored MTP block)
  std::vector<int64_t> compress_ratio;     // [n_layer] attention.compress_ratios: 0, 4 or 128
  std::vector<float> swiglu_limit;         // [n_layer] swiglu_clamp_exp (routed experts)
  std::vector<float> swiglu_limit_shared;  // [n_layer] swiglu_clamp_shexp, else swiglu_clamp_exp
  int64_t hc_mix = 0;                      // (2 + hc_mult) * hc_mult: pre, post, comb coefficients
  int64_t o_group_in = 0;                  // n_head * head_dim / o_groups: inputs per output group
  RopeParams rope_main;                    // sliding-only layers: rope.freq_base, no scaling
  RopeParams rope_compress;                // CSA/HCA layers and their compressors and indexer: YaRN

  Ds4Attn attn_kind(int64_t il) const {
    const int64_t m = compress_ratio[il];
    return m == 0 ? Ds4Attn::Sliding : m == kDs4CsaRatio ? Ds4Attn::Csa : Ds4Attn::Hca;
  }
  bool is_hash_layer(int64_t il) const { return il < n_hash_layers; }
  const RopeParams& rope_for(int64_t il) const { return compress_ratio[il] ? rope_compress : rope_main; }
  bool has_csa() const;
};

// Reads and validates a deepseek4 file's config. Throws one mla::Error naming the key and what
// was wrong ("deepseek4: m.gguf: key 'deepseek4.attention.compress_ratios' has 3 entries, expected
// 4 (block_count) to 5 (block_count + nextn_predict_layers)"). Any other architecture is refused.
Deepseek4Config load_deepseek4_config(const GgufFile& f);

// Multi-line summary of the derived schedule and sizes (for `mla gguf inspect` and logs).
std::string describe_deepseek4_config(const Deepseek4Config& c);

}  // namespace mla
