// Random-weight DeepSeek-V4 (`deepseek4`) GGUF files: the keys of docs/DEEPSEEK-V4.md §2 and the
// tensors of §3, with the names and shapes model/deepseek4_weights.cpp binds.
#include <fmt/format.h>

#include <fstream>
#include <numeric>
#include <sstream>

#include "model/deepseek4_config.h"
#include "model/synth.h"
#include "model/synth_builder.h"

namespace mla {
namespace {

using namespace synth;  // NOLINT(google-build-using-namespace): the writers' shared tools

// The per-layer ratios of s.compress_ratios ("": 4, 128, 0 repeated), each checked.
std::vector<int64_t> layer_ratios(const SynthSpec& s) {
  std::vector<int64_t> r;
  if (s.compress_ratios.empty()) {
    const int64_t cycle[] = {kDs4CsaRatio, kDs4HcaRatio, 0};
    for (int64_t il = 0; il < s.n_layer; ++il) r.push_back(cycle[il % 3]);
    return r;
  }
  std::stringstream in(s.compress_ratios);
  for (std::string item; std::getline(in, item, ',');) {
    if (item != "0" && item != "4" && item != "128") fail("synth: compress_ratios entry '{}' is not 0, 4 or 128", item);
    r.push_back(std::stoll(item));
  }
  if (static_cast<int64_t>(r.size()) != s.n_layer)
    fail("synth: compress_ratios '{}' has {} entries, expected one per layer ({})", s.compress_ratios, r.size(),
         s.n_layer);
  return r;
}

void check_spec4(const SynthSpec& s, const std::vector<int64_t>& ratios) {
  auto pos = [](const char* k, int64_t v) {
    if (v < 1) fail("synth: {} is {}, expected >= 1", k, v);
  };
  for (auto [k, v] : {std::pair{"n_layer", s.n_layer},
                      {"n_embd", s.n_embd},
                      {"n_head", s.n_head},
                      {"head_dim", s.head_dim},
                      {"q_lora_rank", s.q_lora_rank},
                      {"n_window", s.n_window},
                      {"o_groups", s.o_groups},
                      {"o_lora_rank", s.o_lora_rank},
                      {"n_expert", s.n_expert},
                      {"n_expert_used", s.n_expert_used},
                      {"n_ff_exp", s.n_ff_exp},
                      {"hc_mult", s.hc_mult},
                      {"hc_sinkhorn_iters", s.hc_sinkhorn_iters},
                      {"n_vocab", s.n_vocab},
                      {"n_ctx_train", s.n_ctx_train}})
    pos(k, v);
  if (s.qk_rope < 2 || s.qk_rope % 2 || s.qk_rope > s.head_dim)
    fail("synth: qk_rope is {}, expected an even value in 2..head_dim {}", s.qk_rope, s.head_dim);
  if ((s.n_head * s.head_dim) % s.o_groups)
    fail("synth: o_groups {} does not divide n_head x head_dim {}", s.o_groups, s.n_head * s.head_dim);
  if (s.n_expert_used > s.n_expert)
    fail("synth: n_expert_used {} is more than n_expert {}", s.n_expert_used, s.n_expert);
  if (s.n_hash_layers < 0 || s.n_hash_layers > s.n_layer)
    fail("synth: n_hash_layers is {}, expected 0 to n_layer {}", s.n_hash_layers, s.n_layer);
  if (s.rope_scaling != "none" && s.rope_scaling != "yarn")
    fail("synth: rope_scaling '{}' is not none or yarn (deepseek4)", s.rope_scaling);
  if (std::find(ratios.begin(), ratios.end(), kDs4CsaRatio) != ratios.end()) {
    pos("n_indexer_head", s.n_indexer_head);
    pos("indexer_top_k", s.indexer_top_k);
    if (s.indexer_head_dim < s.qk_rope || s.indexer_head_dim % 2)
      fail("synth: indexer_head_dim is {}, expected an even value >= qk_rope {}", s.indexer_head_dim, s.qk_rope);
  }
  if (!(s.swiglu_limit > 0)) fail("synth: swiglu_limit is {}, expected > 0", s.swiglu_limit);
}

void write_keys4(const SynthSpec& s, const std::vector<int64_t>& ratios, GgufWriter& w, int64_t& n_vocab) {
  const std::string a = "deepseek4.";
  auto u32 = [](int64_t v) { return GgufValue::u32(static_cast<uint32_t>(v)); };
  auto f32 = [](double v) { return GgufValue::f32(static_cast<float>(v)); };
  w.set("general.architecture", GgufValue::str("deepseek4"));
  w.set("general.name", GgufValue::str(s.name));
  w.set(a + "block_count", u32(s.n_layer));
  w.set(a + "context_length", u32(s.n_ctx_train));
  w.set(a + "embedding_length", u32(s.n_embd));
  w.set(a + "attention.head_count", u32(s.n_head));
  w.set(a + "attention.head_count_kv", u32(1));
  w.set(a + "attention.key_length", u32(s.head_dim));
  w.set(a + "attention.value_length", u32(s.head_dim));
  w.set(a + "attention.layer_norm_rms_epsilon", f32(s.rms_eps));
  w.set(a + "attention.q_lora_rank", u32(s.q_lora_rank));
  w.set(a + "attention.sliding_window", u32(s.n_window));
  w.set(a + "attention.output_group_count", u32(s.o_groups));
  w.set(a + "attention.output_lora_rank", u32(s.o_lora_rank));
  std::vector<GgufValue> rs;
  rs.reserve(ratios.size());
  for (int64_t r : ratios) rs.push_back(u32(r));
  w.set(a + "attention.compress_ratios", GgufValue::array(GgufValueType::UINT32, std::move(rs)));
  w.set(a + "attention.compress_rope_freq_base", f32(s.compress_rope_base));
  if (std::find(ratios.begin(), ratios.end(), kDs4CsaRatio) != ratios.end()) {
    w.set(a + "attention.indexer.head_count", u32(s.n_indexer_head));
    w.set(a + "attention.indexer.key_length", u32(s.indexer_head_dim));
    w.set(a + "attention.indexer.top_k", u32(s.indexer_top_k));
  }
  w.set(a + "rope.dimension_count", u32(s.qk_rope));
  w.set(a + "rope.freq_base", f32(s.rope_freq_base));
  if (s.rope_scaling == "yarn") {
    w.set(a + "rope.scaling.type", GgufValue::str("yarn"));
    w.set(a + "rope.scaling.factor", f32(s.rope_factor));
    w.set(a + "rope.scaling.original_context_length", u32(s.rope_orig_ctx));
  }
  w.set(a + "expert_count", u32(s.n_expert));
  w.set(a + "expert_used_count", u32(s.n_expert_used));
  w.set(a + "expert_shared_count", u32(s.n_expert_shared));
  w.set(a + "expert_feed_forward_length", u32(s.n_ff_exp));
  w.set(a + "expert_weights_scale", f32(s.weights_scale));
  w.set(a + "expert_weights_norm", GgufValue::boolean(true));
  w.set(a + "expert_gating_func", u32(kDs4GatingSqrtSoftplus));
  w.set(a + "swiglu_clamp_exp", f32(s.swiglu_limit));
  w.set(a + "hash_layer_count", u32(s.n_hash_layers));
  w.set(a + "hyper_connection.count", u32(s.hc_mult));
  w.set(a + "hyper_connection.sinkhorn_iterations", u32(s.hc_sinkhorn_iters));
  w.set(a + "hyper_connection.epsilon", f32(1e-6));
  copy_vocab_and_template(s, w, n_vocab);
  w.set(a + "vocab_size", u32(n_vocab));
}

// A hyper-connection: fn {hc_mult * D, n_mix}, base [n_mix] (small), scale [n_scale] (near 1).
void add_hc(Builder& b, const SynthSpec& s, const std::string& p, int64_t n_mix, int64_t n_scale) {
  b.matrix(p + "_fn.weight", "", {s.hc_mult * s.n_embd, n_mix});
  b.add(p + "_base.weight", "", {n_mix}, normals(s, p + "_base.weight", n_mix, 0.1));
  b.norm(p + "_scale.weight", n_scale);
}

// A compressor of width `width` (c x dim) over windows of m tokens.
void add_compressor(Builder& b, const SynthSpec& s, const std::string& p, int64_t width, int64_t dim, int64_t m,
                    const char* role) {
  b.matrix(p + "_kv.weight", role, {s.n_embd, width});
  b.matrix(p + "_gate.weight", role, {s.n_embd, width});
  b.add(p + "_ape.weight", "", {width, m}, normals(s, p + "_ape.weight", width * m, 0.1));
  b.norm(p + "_norm.weight", dim);
}

void add_attention4(Builder& b, const SynthSpec& s, int64_t il, int64_t m) {
  const int64_t E = s.n_embd, H = s.n_head, d = s.head_dim, G = s.o_groups, OR = s.o_lora_rank;
  const std::string p = fmt::format("blk.{}.", il);
  b.norm(p + "attn_norm.weight", E);
  b.matrix(p + "attn_q_a.weight", "attn_q", {E, s.q_lora_rank});
  b.norm(p + "attn_q_a_norm.weight", s.q_lora_rank);
  b.matrix(p + "attn_q_b.weight", "attn_q", {s.q_lora_rank, H * d});
  b.matrix(p + "attn_kv.weight", "attn_kv_a", {E, d});
  b.norm(p + "attn_kv_a_norm.weight", d);
  b.add(p + "attn_sinks.weight", "", {H}, normals(s, p + "attn_sinks.weight", H, 0.5));
  b.matrix(p + "attn_output_a.weight", "attn_output", {H * d / G, G * OR});
  b.matrix(p + "attn_output_b.weight", "attn_output", {G * OR, E});
  const int64_t n_mix = (2 + s.hc_mult) * s.hc_mult;
  add_hc(b, s, p + "hc_attn", n_mix, 3);
  add_hc(b, s, p + "hc_ffn", n_mix, 3);
  if (m == 0) return;
  const bool csa = m == kDs4CsaRatio;
  add_compressor(b, s, p + "attn_compressor", (csa ? 2 : 1) * d, d, m, "compressor");
  if (!csa) return;
  const int64_t ci = s.indexer_head_dim;
  add_compressor(b, s, p + "indexer_compressor", 2 * ci, ci, m, "indexer");
  b.matrix(p + "indexer.attn_q_b.weight", "indexer", {s.q_lora_rank, s.n_indexer_head * ci});
  b.matrix(p + "indexer.proj.weight", "indexer", {E, s.n_indexer_head});
}

// Hash routing: n_expert_used distinct experts per token id, from the tensor's own stream.
std::vector<uint8_t> hash_table(const SynthSpec& s, const std::string& name, int64_t n_vocab) {
  const int64_t X = s.n_expert, k = s.n_expert_used;
  Normal g(s.seed, name);
  std::vector<int32_t> ids(static_cast<size_t>(n_vocab * k)), perm(static_cast<size_t>(X));
  for (int64_t t = 0; t < n_vocab; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t j = 0; j < k; ++j) {  // the first k of a Fisher-Yates shuffle
      const auto pick = j + static_cast<int64_t>(g.uniform() * static_cast<double>(X - j));
      std::swap(perm[j], perm[std::min(pick, X - 1)]);
      ids[t * k + j] = perm[j];
    }
  }
  std::vector<uint8_t> bytes(ids.size() * sizeof(int32_t));
  std::memcpy(bytes.data(), ids.data(), bytes.size());
  return bytes;
}

void add_moe4(Builder& b, GgufWriter& w, const SynthSpec& s, int64_t il, int64_t n_vocab) {
  const int64_t E = s.n_embd, X = s.n_expert, F = s.n_ff_exp;
  const std::string p = fmt::format("blk.{}.", il);
  b.norm(p + "ffn_norm.weight", E);
  b.matrix(p + "ffn_gate_inp.weight", "router", {E, X});
  if (il < s.n_hash_layers) {
    const std::string name = p + "ffn_gate_tid2eid.weight";
    w.add_tensor(name, GgmlType::I32, {s.n_expert_used, n_vocab}, hash_table(s, name, n_vocab));
  } else {
    b.add(p + "exp_probs_b.bias", "", {X}, normals(s, p + "exp_probs_b.bias", X, 0.05));
  }
  b.matrix(p + "ffn_gate_exps.weight", "ffn_exps", {E, F, X});
  b.matrix(p + "ffn_up_exps.weight", "ffn_exps", {E, F, X});
  b.matrix(p + "ffn_down_exps.weight", "ffn_exps", {F, E, X});
  if (s.n_expert_shared == 0) return;
  const int64_t S = F * s.n_expert_shared;
  b.matrix(p + "ffn_gate_shexp.weight", "ffn_shexp", {E, S});
  b.matrix(p + "ffn_up_shexp.weight", "ffn_shexp", {E, S});
  b.matrix(p + "ffn_down_shexp.weight", "ffn_shexp", {S, E});
}

}  // namespace

void write_synth_deepseek4(const SynthSpec& s, const std::string& path) {
  const std::vector<int64_t> ratios = layer_ratios(s);
  check_spec4(s, ratios);
  GgufWriter w;
  int64_t n_vocab = s.n_vocab;
  write_keys4(s, ratios, w, n_vocab);
  Builder b(s, w);
  const int64_t E = s.n_embd;
  // Matrices at N(0, 1/E) (every use of the embedding is normalised first); streamed, so the
  // V4-Flash vocabulary's table never exists as F32 in memory.
  b.matrix("token_embd.weight", "embd", {E, n_vocab});
  b.norm("output_norm.weight", E);
  b.matrix("output.weight", "output", {E, n_vocab});
  add_hc(b, s, "output_hc", s.hc_mult, 1);
  for (int64_t il = 0; il < s.n_layer; ++il) {
    add_attention4(b, s, il, ratios[il]);
    add_moe4(b, w, s, il, n_vocab);
  }
  w.write(path);
}

}  // namespace mla
