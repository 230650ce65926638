#pragma once
// Every tensor of an MLA-MoE GGUF (deepseek2, deepseek32, glm-dsa) bound by name, with its type and shape checked
// against the config (a mismatch names the tensor, the expected and the actual shape or type).
//
// Matmul weights stay in the file's mapping, in the file's type. Norm vectors are converted to
// F32. The MLA projections W_UK / W_UV are read in place, in the file's type, wherever the file
// has the form a path reads (attn_k_b for MQA's W_UK, attn_kv_b's K rows for MHA's, attn_v_b or
// attn_kv_b's V rows for W_UV); the attention kernels convert a head's rows as they use them. The
// other form of W_UK is the transpose of the file's, and quantized blocks run along the rows, so
// it is dequantized to F32 and transposed at load, only when the path that reads it can run.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "model/config.h"
#include "model/expert_cache.h"

namespace mla {

class GgufFile;

enum class MlaLayout { Split, Fused };  // attn_k_b + attn_v_b, or attn_kv_b

struct LayerWeights {
  std::vector<float> attn_norm;       // [n_embd]
  WeightMatrix attn_q_a;              // {n_embd, q_lora_rank}              (absent when lite)
  std::vector<float> attn_q_a_norm;   // [q_lora_rank]                      (absent when lite)
  WeightMatrix attn_q_b;              // {q_lora_rank, n_head * qk_head}    (absent when lite)
  WeightMatrix attn_q;                // {n_embd, n_head * qk_head}         (lite only)
  WeightMatrix attn_kv_a_mqa;         // {n_embd, kv_lora_rank + qk_rope}
  std::vector<float> attn_kv_a_norm;  // [kv_lora_rank]
  // The MLA projections (kernels/attention.h), empty when the path that reads them will not run:
  //   w_uk   MQA: [n_head][kv_lora_rank][qk_nope]: attn_k_b in place; F32 transpose for fused files
  //   w_uk_t MHA: [n_head][qk_nope][kv_lora_rank]: attn_kv_b's K rows in place; F32 for split files
  //   w_uv   [n_head][v_head][kv_lora_rank]: attn_v_b, or attn_kv_b's V rows, in place
  MlaProj w_uk, w_uk_t, w_uv;
  std::vector<std::shared_ptr<const std::vector<float>>> mla_f32;  // the F32 forms derived at load
  WeightMatrix attn_output;                                        // {n_head * v_head, n_embd}
  std::vector<float> ffn_norm;                                     // [n_embd]

  // DSA lightning indexer (layers that run their own; n_rows 0 elsewhere).
  WeightMatrix idx_q_b;                         // {q_lora_rank, n_indexer_head * indexer_head_dim}
  WeightMatrix idx_k;                           // {n_embd, indexer_head_dim}
  std::vector<float> idx_k_norm, idx_k_norm_b;  // [indexer_head_dim] LayerNorm weight and bias
  WeightMatrix idx_proj;                        // {n_embd, n_indexer_head}

  bool is_moe = false;
  WeightMatrix ffn_gate, ffn_up;              // dense: {n_embd, n_ff}
  WeightMatrix ffn_down;                      // dense: {n_ff, n_embd}
  WeightMatrix ffn_gate_inp;                  // {n_embd, n_expert}
  std::vector<float> exp_probs_b;             // [n_expert] selection bias; empty when absent
  bool gate_up_merged = false;                // ffn_gate_up_exps {n_embd, 2 * n_ff_exp, n_expert}: gate rows first
  WeightMatrix ffn_gate_exps, ffn_up_exps;    // {n_embd, n_ff_exp, n_expert} as n_expert * n_ff_exp rows
  WeightMatrix ffn_gate_up_exps;              // merged form, n_expert * 2 * n_ff_exp rows
  WeightMatrix ffn_down_exps;                 // {n_ff_exp, n_embd, n_expert} as n_expert * n_embd rows
  WeightMatrix ffn_gate_shexp, ffn_up_shexp;  // {n_embd, n_ff_exp * n_expert_shared}; n_rows 0 when none
  WeightMatrix ffn_down_shexp;                // {n_ff_exp * n_expert_shared, n_embd}
};

// The first MTP (nextn) block, blk.{n_layer}: the draft layer of speculative decoding. Its input
// is eh_proj · [enorm(embed(t)) ; hnorm(h)] (embedding first), then an ordinary decoder block
// (dense MLA, no indexer), then head_norm and head. The optional shared_head_* / embed_tokens
// tensors fall back to the trunk's output_norm / output / token_embd.
struct NextnWeights {
  bool present = false;
  int64_t layer_index = 0;       // blk.N: its MoE / dense choice and its name
  WeightMatrix eh_proj;          // {2 * n_embd, n_embd}
  std::vector<float> enorm;      // [n_embd]
  std::vector<float> hnorm;      // [n_embd]
  std::vector<float> head_norm;  // [n_embd]: shared_head_norm or output_norm
  WeightMatrix head;             // {n_embd, n_vocab}: shared_head_head or output
  WeightMatrix embed;            // {n_embd, n_vocab}: embed_tokens or token_embd
  LayerWeights layer;
};

struct DeepseekWeights {
  WeightMatrix token_embd;         // {n_embd, n_vocab}
  std::vector<float> output_norm;  // [n_embd]
  WeightMatrix output;             // {n_embd, n_vocab}; token_embd when the file has no output
  bool output_tied = false;
  MlaLayout layout = MlaLayout::Split;  // the MLA layout the file carries
  std::vector<LayerWeights> layers;
  NextnWeights nextn;                         // present only when loaded (WeightLoadOptions::load_mtp)
  std::shared_ptr<PackedWeightStore> packed;  // repacked copies of matrices (WeightMatrix::packed)
  // With a weights-memory budget: the routed experts' cache (their matrices then point into the
  // file but are read only through it, model/expert_cache.h); nullptr: every expert resident.
  std::shared_ptr<ExpertCache> expert_cache;
};

struct WeightLoadOptions {
  bool need_mha = true;   // derive W_UK in the decompression (attn_kv_b) form
  bool need_mqa = true;   // derive W_UK in the absorption (attn_k_b) form
  bool repack = true;     // repack matmul weights into 16-row groups where the CPU has the kernels
  bool load_mtp = false;  // bind the first MTP (nextn) block (speculative decoding); the file must have one
  bool prefault = true;   // map every page at open (--no-prefault turns it off); several ranks map their shard instead
  // budget_bytes > 0 (--weights-memory): routed experts stream through an ExpertCache (bound here,
  // DeepseekWeights::expert_cache); they are neither prefaulted (load_deepseek2) nor repacked.
  ExpertCacheOptions expert_cache;
};

// Binds every tensor of the trunk layers and, with load_mtp, of the first MTP block (other MTP
// blocks, and all of them without load_mtp, are left untouched in the mapping). The
// returned matrices point into f's mapping: keep f alive.
DeepseekWeights bind_deepseek_weights(const GgufFile& f, const DeepseekConfig& c, const WeightLoadOptions& opt = {});

// Repacks each (matrix, rows per slice) of todo that repack_weight accepts into one store (a
// huge-page arena), dropping the file pages it copied from the mapping; nullptr when none was
// repacked or the copies would take more than 85% of the available memory (said in a log line).
std::shared_ptr<PackedWeightStore> repack_matrix_set(const std::vector<std::pair<WeightMatrix*, int64_t>>& todo);

// Dequantizes a whole tensor (any dequantizable type) to F32, row by row.
std::vector<float> dequantize_tensor(const GgufFile& f, const std::string& name);

}  // namespace mla
