#include "model/deepseek4_config.h"

#include <fmt/format.h>

#include <cmath>
#include <variant>

#include "gguf/gguf.h"
#include "util/error.h"

namespace mla {
namespace {

using C = Deepseek4Config;
using Field = std::variant<int64_t C::*, double C::*, std::string C::*>;

struct KeySpec {
  const char* name;  // after "deepseek4."
  bool required;
  Field field;
};

constexpr const char* kArch = "deepseek4";

// The single table from GGUF metadata to scalar config fields. The array-valued keys
// (compress_ratios, swiglu_clamp_*) and the checked-only ones are read in read_schedule.
const KeySpec kKeys[] = {
    {"block_count", true, &C::n_layer_all},
    {"nextn_predict_layers", false, &C::n_nextn},
    {"context_length", true, &C::n_ctx_train},
    {"embedding_length", true, &C::n_embd},
    {"attention.head_count", true, &C::n_head},
    {"attention.key_length", true, &C::head_dim},
    {"attention.layer_norm_rms_epsilon", true, &C::rms_eps},
    {"attention.q_lora_rank", true, &C::q_lora_rank},
    {"attention.sliding_window", true, &C::n_window},
    {"attention.output_group_count", true, &C::o_groups},
    {"attention.output_lora_rank", true, &C::o_lora_rank},
    {"attention.compress_rope_freq_base", true, &C::compress_rope_base},
    {"rope.dimension_count", true, &C::n_rot},
    {"rope.freq_base", false, &C::rope_freq_base},
    {"rope.scaling.type", false, &C::rope_scaling_type},
    {"rope.scaling.factor", false, &C::rope_scaling_factor},
    {"rope.scaling.original_context_length", false, &C::rope_orig_ctx},
    {"rope.scaling.yarn_beta_fast", false, &C::rope_yarn_beta_fast},
    {"rope.scaling.yarn_beta_slow", false, &C::rope_yarn_beta_slow},
    {"expert_count", true, &C::n_expert},
    {"expert_used_count", true, &C::n_expert_used},
    {"expert_shared_count", true, &C::n_expert_shared},
    {"expert_feed_forward_length", true, &C::n_ff_exp},
    {"expert_weights_scale", true, &C::expert_weights_scale},
    {"expert_gating_func", true, &C::expert_gating_func},
    {"hash_layer_count", true, &C::n_hash_layers},
    {"hyper_connection.count", true, &C::hc_mult},
    {"hyper_connection.sinkhorn_iterations", true, &C::hc_sinkhorn_iters},
    {"hyper_connection.epsilon", true, &C::hc_eps},
    {"vocab_size", false, &C::n_vocab},
};

// The lightning indexer's keys: required when some layer is CSA.
const KeySpec kIndexerKeys[] = {
    {"attention.indexer.head_count", true, &C::n_indexer_head},
    {"attention.indexer.key_length", true, &C::indexer_head_dim},
    {"attention.indexer.top_k", true, &C::indexer_top_k},
};

std::string key(const char* name) { return fmt::format("{}.{}", kArch, name); }

template <size_t N>
void read_keys(const GgufFile& f, const KeySpec (&keys)[N], C& c) {
  for (const auto& k : keys) {
    const std::string name = key(k.name);
    if (!f.has(name)) {
      if (k.required) fail("{}: {}: missing required key '{}'", kArch, f.path(), name);
      continue;
    }
    std::visit(
        [&](auto member) {
          using T = std::remove_reference_t<decltype(c.*member)>;
          if constexpr (std::is_same_v<T, int64_t>) {
            const int64_t v = f.get_int(name);
            if (v < 0) fail("{}: {}: key '{}' is {}, expected a value >= 0", kArch, f.path(), name, v);
            c.*member = v;
          } else if constexpr (std::is_same_v<T, double>) {
            c.*member = f.get_float(name);
          } else {
            c.*member = f.get_string(name);
          }
        },
        k.field);
  }
}

// Per-layer arrays may carry one entry per stored block and one per MTP layer more (the HF
// config's lists include the MTP layer); fewer than the trunk's layers, or more than that, is an error.
void check_array_length(const GgufFile& f, const C& c, const std::string& name, size_t n) {
  const auto lo = static_cast<size_t>(c.n_layer_all), hi = static_cast<size_t>(c.n_layer_all + c.n_nextn);
  if (n < lo || n > hi)
    fail("{}: {}: key '{}' has {} entries, expected {} (block_count){}", kArch, f.path(), name, n, lo,
         hi > lo ? fmt::format(" to {} (block_count + nextn_predict_layers)", hi) : std::string());
}

// A scalar or one value per layer (llama.cpp's get_key_or_arr).
std::vector<float> per_layer_floats(const GgufFile& f, const C& c, const std::string& name) {
  const GgufValue& v = f.require(name);
  std::vector<float> out;
  if (v.type() == GgufValueType::ARRAY) {
    out = f.get_floats(name);
    check_array_length(f, c, name, out.size());
  } else {
    out.assign(static_cast<size_t>(c.n_layer_all), static_cast<float>(f.get_float(name)));
  }
  for (size_t i = 0; i < out.size(); ++i)
    if (!(out[i] > 0) || !std::isfinite(out[i]))
      fail("{}: {}: key '{}' entry {} is {}, expected a finite limit > 0", kArch, f.path(), name, i, out[i]);
  out.resize(static_cast<size_t>(c.n_layer));
  return out;
}

void read_schedule(const GgufFile& f, C& c) {
  const std::string ratios_key = key("attention.compress_ratios");
  if (!f.has(ratios_key)) fail("{}: {}: missing required key '{}'", kArch, f.path(), ratios_key);
  if (f.require(ratios_key).type() != GgufValueType::ARRAY)
    fail("{}: {}: key '{}' must be an array of per-layer compression ratios", kArch, f.path(), ratios_key);
  std::vector<int64_t> ratios = f.get_ints(ratios_key);
  check_array_length(f, c, ratios_key, ratios.size());
  for (size_t i = 0; i < ratios.size(); ++i)
    if (ratios[i] != 0 && ratios[i] != kDs4CsaRatio && ratios[i] != kDs4HcaRatio)
      fail("{}: {}: key '{}' entry {} is {}: unknown layer type (expected 0 = sliding window only, {} = CSA, {} = HCA)",
           kArch, f.path(), ratios_key, i, ratios[i], kDs4CsaRatio, kDs4HcaRatio);
  ratios.resize(static_cast<size_t>(c.n_layer));
  c.compress_ratio = ratios;

  const std::string clamp_key = key("swiglu_clamp_exp"), shared_key = key("swiglu_clamp_shexp");
  if (!f.has(clamp_key)) fail("{}: {}: missing required key '{}'", kArch, f.path(), clamp_key);
  c.swiglu_limit = per_layer_floats(f, c, clamp_key);
  c.swiglu_limit_shared = f.has(shared_key) ? per_layer_floats(f, c, shared_key) : c.swiglu_limit;
}

// The trunk is every block unless the file stores the MTP block(s) at the end (blk.{n}.nextn.*);
// published V4-Flash files say nextn_predict_layers 1 with no MTP tensors and 43 trunk blocks.
int64_t trunk_layers(const GgufFile& f, const C& c) {
  if (c.n_nextn == 0 || c.n_nextn >= c.n_layer_all) return c.n_layer_all;
  const int64_t first_mtp = c.n_layer_all - c.n_nextn;
  return f.find_tensor(fmt::format("blk.{}.nextn.eh_proj.weight", first_mtp)) ? first_mtp : c.n_layer_all;
}

template <class Bad>
void check_dims(const GgufFile& f, const C& c, const Bad& bad) {
  if (c.n_layer_all == 0 || c.n_embd == 0 || c.n_head == 0 || c.head_dim == 0)
    bad("block_count, embedding_length, attention.head_count and attention.key_length must be > 0");
  if (auto kv = f.opt_int(key("attention.head_count_kv")); kv && *kv != 1)
    bad(fmt::format("attention.head_count_kv is {}, expected 1 (one shared key/value head)", *kv));
  if (auto v = f.opt_int(key("attention.value_length")); v && *v != c.head_dim)
    bad(
        fmt::format("attention.value_length {} differs from attention.key_length {} (keys and values are one "
                    "tensor)",
                    *v, c.head_dim));
  if (c.n_rot == 0 || c.n_rot % 2 != 0 || c.n_rot > c.head_dim)
    bad(fmt::format("rope.dimension_count {} must be even, > 0 and <= attention.key_length {}", c.n_rot, c.head_dim));
  if (c.q_lora_rank == 0 || c.n_window == 0) bad("attention.q_lora_rank and attention.sliding_window must be > 0");
  if (c.o_groups == 0 || c.o_lora_rank == 0 || (c.n_head * c.head_dim) % c.o_groups != 0)
    bad(
        fmt::format("attention.output_group_count {} must divide head_count x key_length {} (and output_lora_rank "
                    "{} be > 0)",
                    c.o_groups, c.n_head * c.head_dim, c.o_lora_rank));
  if (c.n_expert == 0 || c.n_expert_used == 0 || c.n_expert_used > c.n_expert || c.n_ff_exp == 0)
    bad(fmt::format("expert_used_count {} must be in 1..expert_count {} (and expert_feed_forward_length > 0)",
                    c.n_expert_used, c.n_expert));
  if (c.expert_gating_func != kDs4GatingSqrtSoftplus)
    bad(fmt::format("key '{}' is {}: unknown scoring function for DeepSeek-V4 (expected {} = sqrtsoftplus)",
                    key("expert_gating_func"), c.expert_gating_func, kDs4GatingSqrtSoftplus));
  if (auto norm = f.opt_bool(key("expert_weights_norm")); norm && !*norm)
    bad("expert_weights_norm is false; DeepSeek-V4 always normalises the chosen experts' weights");
  if (c.hc_mult == 0 || c.hc_mult > 16 || c.hc_sinkhorn_iters == 0)
    bad(fmt::format("hyper_connection.count {} must be in 1..16 and sinkhorn_iterations {} > 0", c.hc_mult,
                    c.hc_sinkhorn_iters));
  if (c.n_nextn > c.n_layer_all) bad("nextn_predict_layers exceeds block_count");
}

void derive_rope(const GgufFile& f, C& c) {
  const std::string& t = c.rope_scaling_type;
  if (!t.empty() && t != "none" && t != "yarn")
    fail("{}: {}: key '{}' is '{}', expected none or yarn", kArch, f.path(), key("rope.scaling.type"), t);
  c.rope_main.n_dims = static_cast<int>(c.n_rot);
  c.rope_main.freq_base = c.rope_freq_base;
  c.rope_compress = c.rope_main;
  c.rope_compress.freq_base = c.compress_rope_base;
  if (t == "yarn" && c.rope_scaling_factor > 1) {
    if (c.rope_orig_ctx <= 0)
      fail("{}: {}: yarn scaling needs key '{}'", kArch, f.path(), key("rope.scaling.original_context_length"));
    // transformers forces the compressed layers' YaRN attention factor to 1: cos/sin unscaled.
    c.rope_compress.freq_scale = 1.0 / c.rope_scaling_factor;
    c.rope_compress.ext_factor = 1;
    c.rope_compress.attn_factor = 1;
    c.rope_compress.beta_fast = c.rope_yarn_beta_fast;
    c.rope_compress.beta_slow = c.rope_yarn_beta_slow;
    c.rope_compress.n_ctx_orig = c.rope_orig_ctx;
  }
}

}  // namespace

const char* ds4_attn_name(Ds4Attn a) {
  switch (a) {
    case Ds4Attn::Sliding:
      return "sliding";
    case Ds4Attn::Csa:
      return "csa";
    case Ds4Attn::Hca:
      return "hca";
  }
  return "?";
}

bool Deepseek4Config::has_csa() const {
  for (int64_t m : compress_ratio)
    if (m == kDs4CsaRatio) return true;
  return false;
}

Deepseek4Config load_deepseek4_config(const GgufFile& f) {
  const std::string arch = f.opt_string("general.architecture").value_or("");
  if (arch != kArch) fail("{}: general.architecture is '{}', expected '{}'", f.path(), arch, kArch);
  C c;
  read_keys(f, kKeys, c);
  auto bad = [&](const std::string& what) { fail("{}: {}: {}", kArch, f.path(), what); };
  check_dims(f, c, bad);
  c.n_layer = trunk_layers(f, c);
  read_schedule(f, c);
  if (c.n_hash_layers > c.n_layer)
    bad(fmt::format("hash_layer_count {} exceeds the {} trunk layers", c.n_hash_layers, c.n_layer));
  if (c.has_csa()) {
    read_keys(f, kIndexerKeys, c);
    if (c.n_indexer_head == 0 || c.indexer_top_k == 0 || c.indexer_head_dim < c.n_rot)
      bad(
          fmt::format("attention.indexer.head_count {} and top_k {} must be > 0 and key_length {} >= "
                      "rope.dimension_count {}",
                      c.n_indexer_head, c.indexer_top_k, c.indexer_head_dim, c.n_rot));
  }
  if (c.n_vocab == 0) {
    const GgufTensorInfo* emb = f.find_tensor("token_embd.weight");
    if (!emb || emb->ne.size() < 2) bad("no vocab_size key and no token_embd.weight to take it from");
    c.n_vocab = emb->ne[1];
  }
  derive_rope(f, c);
  c.hc_mix = (2 + c.hc_mult) * c.hc_mult;
  c.o_group_in = c.n_head * c.head_dim / c.o_groups;
  return c;
}

std::string describe_deepseek4_config(const Deepseek4Config& c) {
  std::string layers;
  for (int64_t il = 0; il < c.n_layer; ++il)
    layers += fmt::format("{}{}{}", il ? " " : "", ds4_attn_name(c.attn_kind(il)), c.is_hash_layer(il) ? "+hash" : "");
  return fmt::format(
      "deepseek4: {} layers (+{} MTP), D {}, {} heads x {} (rope {}), q_lora {}, window {}, o_groups {} x {}\n"
      "  experts {} (k {}, shared {}, ff {}), sqrtsoftplus, scale {}, hash layers {}, hc {} (sinkhorn {})\n"
      "  indexer {} heads x {} top-k {}; rope base {} / compressed {} ({})\n"
      "  layers: {}\n",
      c.n_layer, c.n_layer_all - c.n_layer, c.n_embd, c.n_head, c.head_dim, c.n_rot, c.q_lora_rank, c.n_window,
      c.o_groups, c.o_lora_rank, c.n_expert, c.n_expert_used, c.n_expert_shared, c.n_ff_exp, c.expert_weights_scale,
      c.n_hash_layers, c.hc_mult, c.hc_sinkhorn_iters, c.n_indexer_head, c.indexer_head_dim, c.indexer_top_k,
      c.rope_freq_base, c.compress_rope_base, c.rope_compress.ext_factor != 0 ? "yarn" : "no scaling", layers);
}

}  // namespace mla
