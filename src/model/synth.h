#pragma once
// Random-weight deepseek2-family and deepseek4 GGUF files for tests and demos, written as llama.cpp's
// converter would write a real model of that shape (same keys, tensor names, shapes and layouts;
// deepseek4: docs/DEEPSEEK-V4.md §2-3, synth_deepseek4.cpp).
//
// Weight scales keep activations O(1): matrices are N(0, 1/fan_in), norms near 1, embeddings
// N(0, 1), so attention and router softmaxes stay non-degenerate and nothing overflows.
#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "model/weights.h"
#include "util/ggml_type.h"

namespace mla {

struct SynthSpec {
  // deepseek2 | deepseek32 | glm-dsa (the last two carry the DSA indexer) | deepseek4 (DeepSeek-V4:
  // the fields under "DeepSeek-V4" below, and n_layer, n_embd, n_head, q_lora_rank, qk_rope (the
  // rotated dims of a head), the expert counts and widths, weights_scale, the indexer widths,
  // rope_freq_base, rope_scaling none|yarn, n_vocab or vocab, chat_template, type and types)
  std::string arch = "deepseek2";
  int64_t n_layer = 2;  // trunk layers
  int64_t n_layer_dense_lead = 1;
  int64_t n_embd = 256;
  int64_t n_ff = 512;
  int64_t n_head = 4;
  int64_t q_lora_rank = 128;  // 0: lite (attn_q)
  int64_t kv_lora_rank = 128;
  int64_t qk_nope = 32;
  int64_t qk_rope = 32;
  int64_t v_head = 32;
  int64_t n_expert = 8;
  int64_t n_expert_used = 2;
  int64_t n_expert_shared = 1;
  int64_t n_ff_exp = 128;
  int64_t n_expert_groups = 1;
  int64_t n_expert_groups_used = 1;
  std::string gating = "sigmoid";  // softmax | sigmoid
  bool weights_norm = true;
  double weights_scale = 2.5;
  bool exp_probs_b = true;  // write the selection bias (V3 style)
  int64_t n_vocab = 512;    // ignored with vocab_path
  int64_t n_ctx_train = 4096;
  double rms_eps = 1e-6;
  double rope_freq_base = 10000;
  std::string rope_scaling = "none";  // none | linear | yarn
  double rope_factor = 4;
  int64_t rope_orig_ctx = 1024;
  double yarn_mscale_all_dim = 1.0;  // written as yarn_log_multiplier = 0.1 * this (0: not written)
  MlaLayout layout = MlaLayout::Split;
  bool mla_keys = true;         // false: an older file without *_mla keys, head_count_kv = n_head
  bool tied_output = false;     // no output.weight
  bool merged_gate_up = false;  // ffn_gate_up_exps instead of ffn_gate_exps + ffn_up_exps
  // With layout fused: also write attn_k_b {qk_nope, n_head * kv_lora_rank} and attn_v_b
  // {kv_lora_rank, n_head * v_head} (2-D) beside attn_kv_b, the three tensors ik_llama.cpp's
  // convert_hf_to_gguf.py writes for a DeepSeek model.
  bool ik_mla_tensors = false;
  GgmlType type = GgmlType::F32;  // default tensor type of matrices
  // Per-role overrides: embd, output, attn_q, attn_kv_a, attn_mla (k_b/v_b/kv_b), attn_output,
  // ffn (dense), ffn_exps, ffn_shexp, router. Norms and exp_probs_b are always F32. A type
  // whose block does not divide a row falls back to Q8_0, then F16, then F32.
  std::map<std::string, GgmlType> role_types;
  std::string vocab_path;          // take tokenizer.* keys (and the vocabulary size) from this GGUF
  std::string chat_template_path;  // a Jinja file written as tokenizer.chat_template
  // DSA indexer (deepseek32, glm-dsa).
  int64_t n_indexer_head = 4;
  int64_t indexer_head_dim = 64;
  int64_t indexer_top_k = 16;
  std::string indexer_types;  // one '1' (full) / '0' (shared) per layer, written as indexer.types; "": all full
  int64_t n_nextn = 0;        // MTP blocks appended after the trunk (a full block + blk.N.nextn.*)
  // Routed expert tensors made of 64 quantized random rows repeated (each row a pick from them)
  // and written as the file is: every block valid, the values not independent; for files of tens of
  // GB (larger than memory) in minutes. Not with merged_gate_up.
  bool tiled_experts = false;
  // DeepSeek-V4 (arch deepseek4): n_head query heads of head_dim and one shared K=V head of it;
  // compress_ratios one of 0 (sliding window only), 4 (CSA: compressor + lightning indexer) or 128
  // (HCA) per layer, comma-separated ("": 4,128,0 repeated); the first n_hash_layers layers route
  // by token id (ffn_gate_tid2eid); hc_mult residual streams; swiglu_limit the SwiGLU clamp. Roles
  // for types: embd output attn_q attn_kv_a attn_output compressor indexer router ffn_exps
  // ffn_shexp (hyper-connections, norms, biases and sinks are F32).
  int64_t head_dim = 64;
  int64_t n_window = 16;
  int64_t o_groups = 2;
  int64_t o_lora_rank = 32;
  std::string compress_ratios;
  double compress_rope_base = 160000;
  int64_t n_hash_layers = 1;
  int64_t hc_mult = 4;
  int64_t hc_sinkhorn_iters = 20;
  double swiglu_limit = 10;
  uint64_t seed = 1;
  std::string name = "synthetic deepseek2";
};

// Real per-layer widths with few layers and experts, for benchmarks at real per-layer cost:
// "glm5" (GLM-5: glm-dsa, hidden 6144, 64 heads, q_lora 2048, nope 192, v 256, indexer 32 x 128,
// vocabulary 154880) and "deepseek32" (DeepSeek-V3.2: hidden 7168, 128 heads, q_lora 1536,
// nope 128, v 128, indexer 64 x 128, YaRN x40, vocabulary 129280), 2 layers and 16 experts,
// Q4_K; "v2lite" (the `mla bench` model: DeepSeek-V2-Lite's hidden 2048, 16 heads, q_lora 1536,
// kv_lora 512, nope 128, rope 64, v 128, 64 experts top-6 + 2 shared, expert ffn 1408, dense ffn
// 10944, softmax gating, YaRN x40; 4 layers, 1 dense; F16, to be quantized by `mla gguf
// quantize`); "v4flash" (DeepSeek-V4-Flash: deepseek4, hidden 4096, 64 heads of 512 with 64 rotated,
// q_lora 1024, 8 output groups of rank 1024, window 128, 256 experts of 2048 (top 6, 1 shared),
// indexer 64 x 128 top 512, YaRN x16 from 65536 on the compressed layers, vocabulary 129280 unless
// vocab is given; 2 layers (CSA, HCA), the first hash-routed; Q8_0 with MXFP4 routed experts).
// Throws on an unknown name.
void apply_synth_preset(SynthSpec& s, const std::string& preset);

// Applies a JSON object of SynthSpec fields (same names as above; "types" maps roles to type
// names; "type" and "layout" take names; "preset" applies apply_synth_preset first). Throws mla::Error on an unknown
// key or a bad value.
void apply_synth_json(SynthSpec& s, const nlohmann::json& j);
// The spec's field names, for CLI flags that mirror the JSON keys.
const std::vector<std::string>& synth_spec_keys();

// Writes the file (architecture s.arch; deepseek4 through write_synth_deepseek4). Throws mla::Error
// on an inconsistent spec.
void write_synth_deepseek2(const SynthSpec& s, const std::string& path);
void write_synth_deepseek4(const SynthSpec& s, const std::string& path);

// Copy of a deepseek2 file with the MLA projections in the other layout: Fused writes
// attn_kv_b from attn_k_b + attn_v_b, Split the reverse. The re-laid-out tensor is built from
// dequantized values; it keeps the source type when that is exact (F32/F16/BF16 sources, or
// whole rows moved unchanged) and is F32 otherwise, unless keep_quant_type asks to requantize
// into the source type (lossy). Every other tensor and key is copied unchanged.
void convert_mla_layout(const std::string& in_path, const std::string& out_path, MlaLayout target,
                        bool keep_quant_type = false);

}  // namespace mla
