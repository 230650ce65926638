#include "model/deepseek4_weights.h"

#include <fmt/format.h>

#include <cstring>

#include "gguf/gguf.h"
#include "model/tensor_binder.h"
#include "model/weights.h"
#include "util/error.h"

namespace mla {
namespace {

constexpr const char* kArch = "deepseek4";

Ds4HyperConn bind_hc(Binder& b, const Deepseek4Config& c, const std::string& prefix, int64_t n_mix, int64_t n_scale) {
  Ds4HyperConn h;
  h.fn = b.matrix(prefix + "_fn.weight", {c.hc_mult * c.n_embd, n_mix});
  h.base = b.vec(prefix + "_base.weight", n_mix);
  h.scale = b.vec(prefix + "_scale.weight", n_scale);
  return h;
}

Ds4Compressor bind_compressor(Binder& b, const Deepseek4Config& c, const std::string& prefix, int64_t width,
                              int64_t dim, int64_t ratio) {
  Ds4Compressor k;
  k.kv = b.matrix(prefix + "_kv.weight", {c.n_embd, width});
  k.gate = b.matrix(prefix + "_gate.weight", {c.n_embd, width});
  k.ape = b.to_f32(b.require(prefix + "_ape.weight", {width, ratio}));
  k.norm = b.vec(prefix + "_norm.weight", dim);
  return k;
}

// ffn_gate_tid2eid {n_expert_used, n_vocab}, I32: the experts of each token id in hash layers.
std::vector<int32_t> bind_tid2eid(Binder& b, const GgufFile& f, const Deepseek4Config& c, int64_t il) {
  const std::string name = blk(il, "ffn_gate_tid2eid");
  const GgufTensorInfo& t = b.require(name, {c.n_expert_used, c.n_vocab});
  if (t.type != GgmlType::I32)
    fail("{}: {}: tensor '{}' has type {}, expected I32 expert ids", kArch, f.path(), name, ggml_type_name(t.type));
  std::vector<int32_t> ids(static_cast<size_t>(t.n_elements));
  std::memcpy(ids.data(), t.data, ids.size() * sizeof(int32_t));
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= c.n_expert)
      fail("{}: {}: tensor '{}' holds expert id {} (token {}), expected 0..{}", kArch, f.path(), name, ids[i],
           i / static_cast<size_t>(c.n_expert_used), c.n_expert - 1);
  return ids;
}

void bind_attention(Binder& b, const Deepseek4Config& c, int64_t il, Ds4LayerWeights& L) {
  const int64_t E = c.n_embd, d = c.head_dim;
  L.attn_norm = b.vec(blk(il, "attn_norm"), E);
  L.attn_q_a = b.matrix(blk(il, "attn_q_a"), {E, c.q_lora_rank});
  L.attn_q_a_norm = b.vec(blk(il, "attn_q_a_norm"), c.q_lora_rank);
  L.attn_q_b = b.matrix(blk(il, "attn_q_b"), {c.q_lora_rank, c.n_head * d});
  L.attn_kv = b.matrix(blk(il, "attn_kv"), {E, d});
  L.attn_kv_norm = b.vec(blk(il, "attn_kv_a_norm"), d);
  L.attn_sinks = b.vec(blk(il, "attn_sinks"), c.n_head);
  L.attn_output_a = b.matrix(blk(il, "attn_output_a"), {c.o_group_in, c.o_groups * c.o_lora_rank});
  L.attn_output_b = b.matrix(blk(il, "attn_output_b"), {c.o_groups * c.o_lora_rank, E});
  const std::string p = fmt::format("blk.{}.", il);
  L.hc_attn = bind_hc(b, c, p + "hc_attn", c.hc_mix, 3);
  L.hc_ffn = bind_hc(b, c, p + "hc_ffn", c.hc_mix, 3);
  const Ds4Attn kind = c.attn_kind(il);
  if (kind == Ds4Attn::Sliding) return;
  const int64_t m = c.compress_ratio[il], series = kind == Ds4Attn::Csa ? 2 : 1;
  L.compressor = bind_compressor(b, c, p + "attn_compressor", series * d, d, m);
  if (kind != Ds4Attn::Csa) return;
  const int64_t Di = c.indexer_head_dim;
  L.idx_compressor = bind_compressor(b, c, p + "indexer_compressor", 2 * Di, Di, m);
  L.idx_q_b = b.matrix(blk(il, "indexer.attn_q_b"), {c.q_lora_rank, c.n_indexer_head * Di});
  L.idx_proj = b.matrix(blk(il, "indexer.proj"), {E, c.n_indexer_head});
}

void bind_moe(Binder& b, const GgufFile& f, const Deepseek4Config& c, int64_t il, Ds4LayerWeights& L) {
  const int64_t E = c.n_embd, F = c.n_ff_exp, X = c.n_expert, S = c.n_ff_exp * c.n_expert_shared;
  L.ffn_norm = b.vec(blk(il, "ffn_norm"), E);
  L.ffn_gate_inp = b.matrix(blk(il, "ffn_gate_inp"), {E, X});
  if (c.is_hash_layer(il))
    L.tid2eid = bind_tid2eid(b, f, c, il);
  else
    L.exp_probs_b = b.vec(blk(il, "exp_probs_b", "bias"), X);
  L.ffn_gate_exps = b.matrix(blk(il, "ffn_gate_exps"), {E, F, X});
  L.ffn_up_exps = b.matrix(blk(il, "ffn_up_exps"), {E, F, X});
  L.ffn_down_exps = b.matrix(blk(il, "ffn_down_exps"), {F, E, X});
  if (S == 0) return;
  L.ffn_gate_shexp = b.matrix(blk(il, "ffn_gate_shexp"), {E, S});
  L.ffn_up_shexp = b.matrix(blk(il, "ffn_up_shexp"), {E, S});
  L.ffn_down_shexp = b.matrix(blk(il, "ffn_down_shexp"), {S, E});
}

}  // namespace

Deepseek4Weights bind_deepseek4_weights(const GgufFile& f, const Deepseek4Config& c, Ds4BindSummary* summary) {
  Binder b(f, kArch);
  Deepseek4Weights w;
  w.token_embd = b.matrix("token_embd.weight", {c.n_embd, c.n_vocab});
  w.output_norm = b.vec("output_norm.weight", c.n_embd);
  w.output = b.matrix("output.weight", {c.n_embd, c.n_vocab});
  // llama.cpp's converter writes output_hc_*; ik_llama.cpp also accepts hc_head_*.
  const char* head = b.has("output_hc_fn.weight") || !b.has("hc_head_fn.weight") ? "output_hc" : "hc_head";
  w.hc_head = bind_hc(b, c, head, c.hc_mult, 1);
  w.layers.resize(static_cast<size_t>(c.n_layer));
  for (int64_t il = 0; il < c.n_layer; ++il) {
    bind_attention(b, c, il, w.layers[il]);
    bind_moe(b, f, c, il, w.layers[il]);
  }
  Binder::Unbound unbound = b.report_unbound(c.n_layer);
  if (summary) *summary = {static_cast<int64_t>(b.n_bound()), unbound.n_mtp, std::move(unbound.extra)};
  return w;
}

namespace {

// Every matrix a forward multiplies by, with the rows of one slice (an expert's, for the 3-D
// expert tensors; the compressors' and the grouped output's slices are whole 16-row groups when
// their widths are).
void repack_deepseek4(Deepseek4Weights& w, const Deepseek4Config& c) {
  std::vector<std::pair<WeightMatrix*, int64_t>> todo;
  auto whole = [&](WeightMatrix& m) { todo.emplace_back(&m, m.n_rows); };
  whole(w.output);
  whole(w.hc_head.fn);
  for (Ds4LayerWeights& L : w.layers) {
    for (WeightMatrix* m :
         {&L.attn_q_a, &L.attn_q_b, &L.attn_kv, &L.attn_output_b, &L.hc_attn.fn, &L.hc_ffn.fn, &L.compressor.kv,
          &L.compressor.gate, &L.idx_compressor.kv, &L.idx_compressor.gate, &L.idx_q_b, &L.idx_proj, &L.ffn_gate_inp,
          &L.ffn_gate_shexp, &L.ffn_up_shexp, &L.ffn_down_shexp})
      whole(*m);
    todo.emplace_back(&L.attn_output_a, c.o_lora_rank);
    todo.emplace_back(&L.ffn_gate_exps, c.n_ff_exp);
    todo.emplace_back(&L.ffn_up_exps, c.n_ff_exp);
    todo.emplace_back(&L.ffn_down_exps, c.n_embd);
  }
  w.packed = repack_matrix_set(todo);
}

}  // namespace

std::unique_ptr<Deepseek4Bundle> load_deepseek4(const std::string& path, bool repack, Ds4BindSummary* summary) {
  auto b = std::make_unique<Deepseek4Bundle>();
  b->file = GgufFile::open(path, /*prefault=*/false);
  b->config = load_deepseek4_config(*b->file);
  b->weights = bind_deepseek4_weights(*b->file, b->config, summary);
  if (repack) repack_deepseek4(b->weights, b->config);
  return b;
}

}  // namespace mla
