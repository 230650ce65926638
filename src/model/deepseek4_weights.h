#pragma once
// Every tensor of a deepseek4 GGUF that the layer schedule needs, bound by name (llama.cpp's
// converter names; docs/DEEPSEEK-V4.md §3) with its shape and type checked against the config.
// Matmul weights stay in the file's mapping in the file's type; vectors (norms, biases, sinks,
// hyper-connection bases and scales, compressor position biases) are converted to F32; the hash
// routing table is copied as int32 and every id checked against expert_count.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "kernels/matmul.h"
#include "model/deepseek4_config.h"

namespace mla {

// One manifold-constrained hyper-connection: fn {hc_mult * D, hc_mix} (rows: pre, post, comb),
// base [hc_mix], scale [3]. The hyper head has hc_mix = hc_mult and scale [1].
struct Ds4HyperConn {
  WeightMatrix fn;
  std::vector<float> base;
  std::vector<float> scale;
};

// A compressor (the attention's, or the indexer's at indexer_head_dim): width c * dim with c = 2
// for the overlapping CSA windows (series A then B), 1 for HCA.
struct Ds4Compressor {
  WeightMatrix kv;          // {D, c * dim}
  WeightMatrix gate;        // {D, c * dim}
  std::vector<float> ape;   // [m][c * dim]: added to the gate of a window's j-th token
  std::vector<float> norm;  // [dim]
};

struct Ds4LayerWeights {
  std::vector<float> attn_norm;      // [D]
  WeightMatrix attn_q_a;             // {D, q_lora_rank}
  std::vector<float> attn_q_a_norm;  // [q_lora_rank]
  WeightMatrix attn_q_b;             // {q_lora_rank, H * d}
  WeightMatrix attn_kv;              // {D, d}
  std::vector<float> attn_kv_norm;   // [d]
  std::vector<float> attn_sinks;     // [H]
  WeightMatrix attn_output_a;        // {H * d / o_groups, o_groups * o_lora_rank}: group g = rows g*o_lora..
  WeightMatrix attn_output_b;        // {o_groups * o_lora_rank, D}
  Ds4HyperConn hc_attn, hc_ffn;
  Ds4Compressor compressor;                   // CSA / HCA layers
  Ds4Compressor idx_compressor;               // CSA layers: the indexer's keys, at indexer_head_dim
  WeightMatrix idx_q_b;                       // CSA: {q_lora_rank, n_indexer_head * indexer_head_dim}
  WeightMatrix idx_proj;                      // CSA: {D, n_indexer_head}
  std::vector<float> ffn_norm;                // [D]
  WeightMatrix ffn_gate_inp;                  // {D, n_expert}
  std::vector<float> exp_probs_b;             // routed layers: [n_expert] selection bias
  std::vector<int32_t> tid2eid;               // hash layers: [n_vocab][n_expert_used]
  WeightMatrix ffn_gate_exps, ffn_up_exps;    // {D, n_ff_exp, n_expert} as n_expert * n_ff_exp rows
  WeightMatrix ffn_down_exps;                 // {n_ff_exp, D, n_expert} as n_expert * D rows
  WeightMatrix ffn_gate_shexp, ffn_up_shexp;  // {D, n_ff_exp * n_expert_shared}; n_rows 0 when none
  WeightMatrix ffn_down_shexp;                // {n_ff_exp * n_expert_shared, D}
};

struct Deepseek4Weights {
  WeightMatrix token_embd;         // {D, n_vocab}
  std::vector<float> output_norm;  // [D]
  WeightMatrix output;             // {D, n_vocab}
  Ds4HyperConn hc_head;            // output_hc_* (or hc_head_*): fn {hc_mult * D, hc_mult}, scale [1]
  std::vector<Ds4LayerWeights> layers;
  std::shared_ptr<PackedWeightStore> packed;  // repacked copies of the matrices (WeightMatrix::packed), or nullptr
};

// What a binding read of the file (`mla doctor`'s layout check): the tensors bound, the MTP
// blocks' left unread, and any other tensor nothing read (by name).
struct Ds4BindSummary {
  int64_t n_bound = 0;
  int64_t n_mtp_unread = 0;
  std::vector<std::string> unread;
};

// Binds the trunk layers. The matrices point into f's mapping: keep f alive. Throws mla::Error
// naming the first missing or misshapen tensor. summary, when given, receives what was read.
Deepseek4Weights bind_deepseek4_weights(const GgufFile& f, const Deepseek4Config& c, Ds4BindSummary* summary = nullptr);

struct Deepseek4Bundle {
  std::unique_ptr<GgufFile> file;
  Deepseek4Config config;
  Deepseek4Weights weights;
};
// Opens, validates and binds a deepseek4 file; with repack, every matmul weight but the embedding
// table is repacked into 16-row groups for the packed GEMM where this CPU's family has a kernel
// for its type (the process's --no-repack / --simd choice applies). Throws mla::Error naming what
// is wrong. summary, when given, receives what the binding read (bind_deepseek4_weights).
std::unique_ptr<Deepseek4Bundle> load_deepseek4(const std::string& path, bool repack = false,
                                                Ds4BindSummary* summary = nullptr);

}  // namespace mla
