#pragma once
// Hyper-parameters of the MLA-MoE family: `deepseek2` (DeepSeek-V2/V2-Lite/V3/R1, Kimi-K2,
// GLM-4.7-Flash, Moonlight), `deepseek32` (DeepSeek-V3.2) and `glm-dsa` (GLM-5/5.1/5.2). One flat
// struct filled once from the `<arch>.*` metadata through a single key table, validated, with every
// derived size computed here and nowhere else. The architectures differ only in data: the key
// prefix, the optional DSA lightning indexer (its RoPE layout and LayerNorm epsilon), defaults.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/moe.h"
#include "kernels/rope.h"

namespace mla {

class GgufFile;

enum class ModelArch { Deepseek2, Deepseek32, GlmDsa };
const char* model_arch_name(ModelArch a);  // the general.architecture string

// How the indexer rotates the first n_rot dims of its query/key heads: llama.cpp NORM (adjacent
// pairs, GLM) or NEOX (halves, DeepSeek-V3.2).
enum class RopeLayout { Norm, Neox };

struct DeepseekConfig {
  ModelArch arch = ModelArch::Deepseek2;
  // ---- as stored (llama.cpp's convert_hf_to_gguf.py names, under `<arch>.`) ----
  int64_t n_layer_all = 0;           // block_count: trunk + MTP (nextn) blocks
  int64_t n_nextn = 0;               // nextn_predict_layers: MTP blocks at the end, not run here
  int64_t n_ctx_train = 0;           // context_length
  int64_t n_embd = 0;                // embedding_length
  int64_t n_ff = 0;                  // feed_forward_length (dense blocks)
  int64_t n_head = 0;                // attention.head_count
  int64_t n_head_kv = 0;             // attention.head_count_kv (1 in MLA files)
  double rms_eps = 0;                // attention.layer_norm_rms_epsilon
  int64_t q_lora_rank = 0;           // attention.q_lora_rank; 0 when absent ("lite": attn_q)
  int64_t kv_lora_rank = 0;          // attention.kv_lora_rank
  int64_t key_length = 0;            // attention.key_length (kv_lora_rank + qk_rope in MLA files)
  int64_t value_length = 0;          // attention.value_length (kv_lora_rank in MLA files)
  int64_t key_length_mla = 0;        // attention.key_length_mla = qk_nope + qk_rope; 0: absent
  int64_t value_length_mla = 0;      // attention.value_length_mla = v_head_dim; 0: absent
  int64_t n_rot = 0;                 // rope.dimension_count = qk_rope_head_dim
  double rope_freq_base = 10000;     // rope.freq_base
  std::string rope_scaling_type;     // rope.scaling.type: "", none, linear, yarn
  double rope_scaling_factor = 1;    // rope.scaling.factor
  int64_t rope_orig_ctx = 0;         // rope.scaling.original_context_length
  double rope_yarn_log_mul = 0;      // rope.scaling.yarn_log_multiplier = 0.1 * mscale_all_dim
  double rope_yarn_beta_fast = 32;   // rope.scaling.yarn_beta_fast
  double rope_yarn_beta_slow = 1;    // rope.scaling.yarn_beta_slow
  int64_t n_expert = 0;              // expert_count
  int64_t n_expert_used = 0;         // expert_used_count
  int64_t n_expert_shared = 0;       // expert_shared_count
  int64_t n_ff_exp = 0;              // expert_feed_forward_length
  int64_t n_expert_groups = 1;       // expert_group_count
  int64_t n_expert_groups_used = 1;  // expert_group_used_count
  double expert_weights_scale = 1;   // expert_weights_scale (routed_scaling_factor)
  bool expert_weights_norm = false;  // expert_weights_norm (norm_topk_prob)
  int64_t expert_gating_func = 0;    // expert_gating_func: 1 softmax, 2 sigmoid; 0/absent: softmax
  int64_t n_layer_dense_lead = 0;    // leading_dense_block_count
  int64_t n_vocab = 0;               // vocab_size, else tokenizer.ggml.tokens, else token_embd rows
  // DSA lightning indexer (deepseek32, glm-dsa): attention.indexer.*
  int64_t n_indexer_head = 0;    // attention.indexer.head_count
  int64_t indexer_head_dim = 0;  // attention.indexer.key_length
  int64_t indexer_top_k = 0;     // attention.indexer.top_k

  // ---- derived ----
  bool is_lite = false;            // no q LoRA: attn_q instead of attn_q_a/_norm/_b
  bool has_mla_keys = false;       // key_length_mla / value_length_mla were in the file
  int64_t qk_rope = 0;             // qk_rope_head_dim (= n_rot)
  int64_t qk_nope = 0;             // qk_nope_head_dim
  int64_t qk_head = 0;             // qk_nope + qk_rope
  int64_t v_head = 0;              // v_head_dim
  int64_t n_layer = 0;             // trunk layers: block_count - nextn_predict_layers
  int64_t latent_dim = 0;          // kv_lora_rank + qk_rope: floats per token per layer in the cache
  bool has_indexer = false;        // the architecture carries the DSA indexer
  std::vector<bool> indexer_full;  // [n_layer]: runs its own indexer (else reuses the last full layer's top-k)
  RopeLayout indexer_rope = RopeLayout::Norm;
  double indexer_norm_eps = 1e-6;  // the indexer key LayerNorm (transformers' nn.LayerNorm eps)
  MoeGating gating = MoeGating::Softmax;
  double mscale_all_dim = 0;  // rope_yarn_log_mul / 0.1
  double attn_mscale = 1;     // yarn_get_mscale(factor, mscale_all_dim) when yarn and mscale_all_dim
  float kq_scale = 0;         // attn_mscale² / sqrt(qk_head)
  RopeParams rope;            // freq_scale, ext_factor, attn_factor (cos/sin amplitude), corr dims input

  bool layer_is_moe(int64_t il) const { return il >= n_layer_dense_lead; }
  // Indexer-key cache width of a layer: indexer_head_dim where the layer runs its own indexer.
  int64_t indexer_key_dim(int64_t il) const { return has_indexer && indexer_full[il] ? indexer_head_dim : 0; }
};

// Reads and validates the config of a deepseek2 / deepseek32 / glm-dsa file. Dims missing from older files (no `_mla`
// keys) are derived from tensor shapes. Throws one mla::Error naming the key or the
// inconsistency ("deepseek2: expert_count 10 is not divisible by expert_group_count 4").
// Any other general.architecture is refused with a message naming it and the accepted ones.
DeepseekConfig load_deepseek_config(const GgufFile& f);

// One key of the config table as a file gave it: present or not, and the value the config holds
// (the file's, or the default taken when absent). For `mla doctor`'s silent-defaults report.
struct ConfigKeyState {
  std::string key;  // full name, e.g. "deepseek2.rope.scaling.type"
  bool required = false;
  bool present = false;
  std::string value;  // as the config holds it ("" for an empty string)
};
std::vector<ConfigKeyState> deepseek_config_key_states(const GgufFile& f, const DeepseekConfig& c);

// Multi-line human-readable summary of the derived hyper-parameters (for `mla gguf inspect`).
std::string describe_deepseek_config(const DeepseekConfig& c);

}  // namespace mla
