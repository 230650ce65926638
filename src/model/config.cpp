#include "model/config.h"

#include <fmt/format.h>

#include <cmath>
#include <variant>

#include "gguf/gguf.h"
#include "util/error.h"

namespace mla {
namespace {

using C = DeepseekConfig;
using Field = std::variant<int64_t C::*, double C::*, bool C::*, std::string C::*>;

struct KeySpec {
  const char* name;  // after "<arch>."
  bool required;
  Field field;
};

// The single table from GGUF metadata to config fields.
const KeySpec kKeys[] = {
    {"block_count", true, &C::n_layer_all},
    {"nextn_predict_layers", false, &C::n_nextn},
    {"context_length", true, &C::n_ctx_train},
    {"embedding_length", true, &C::n_embd},
    {"feed_forward_length", false, &C::n_ff},
    {"attention.head_count", true, &C::n_head},
    {"attention.head_count_kv", false, &C::n_head_kv},
    {"attention.layer_norm_rms_epsilon", true, &C::rms_eps},
    {"attention.q_lora_rank", false, &C::q_lora_rank},
    {"attention.kv_lora_rank", true, &C::kv_lora_rank},
    {"attention.key_length", false, &C::key_length},
    {"attention.value_length", false, &C::value_length},
    {"attention.key_length_mla", false, &C::key_length_mla},
    {"attention.value_length_mla", false, &C::value_length_mla},
    {"rope.dimension_count", true, &C::n_rot},
    {"rope.freq_base", false, &C::rope_freq_base},
    {"rope.scaling.type", false, &C::rope_scaling_type},
    {"rope.scaling.factor", false, &C::rope_scaling_factor},
    {"rope.scaling.original_context_length", false, &C::rope_orig_ctx},
    {"rope.scaling.yarn_log_multiplier", false, &C::rope_yarn_log_mul},
    {"rope.scaling.yarn_beta_fast", false, &C::rope_yarn_beta_fast},
    {"rope.scaling.yarn_beta_slow", false, &C::rope_yarn_beta_slow},
    {"expert_count", false, &C::n_expert},
    {"expert_used_count", false, &C::n_expert_used},
    {"expert_shared_count", false, &C::n_expert_shared},
    {"expert_feed_forward_length", false, &C::n_ff_exp},
    {"expert_group_count", false, &C::n_expert_groups},
    {"expert_group_used_count", false, &C::n_expert_groups_used},
    {"expert_weights_scale", false, &C::expert_weights_scale},
    {"expert_weights_norm", false, &C::expert_weights_norm},
    {"expert_gating_func", false, &C::expert_gating_func},
    {"leading_dense_block_count", false, &C::n_layer_dense_lead},
    {"vocab_size", false, &C::n_vocab},
};

// The DSA indexer's keys: required by the architectures that carry it, ignored otherwise.
const KeySpec kIndexerKeys[] = {
    {"attention.indexer.head_count", true, &C::n_indexer_head},
    {"attention.indexer.key_length", true, &C::indexer_head_dim},
    {"attention.indexer.top_k", true, &C::indexer_top_k},
};

template <size_t N>
void read_keys(const GgufFile& f, const std::string& prefix, const KeySpec (&keys)[N], C& c) {
  for (const auto& k : keys) {
    std::string key = prefix + k.name;
    if (!f.has(key)) {
      if (k.required) fail("{}: {}: missing required key '{}'", model_arch_name(c.arch), f.path(), key);
      continue;
    }
    std::visit(
        [&](auto member) {
          using T = std::remove_reference_t<decltype(c.*member)>;
          if constexpr (std::is_same_v<T, int64_t>) {
            int64_t v = f.get_int(key);
            if (v < 0) fail("{}: {}: key '{}' is {}, expected a value >= 0", model_arch_name(c.arch), f.path(), key, v);
            c.*member = v;
          } else if constexpr (std::is_same_v<T, double>) {
            c.*member = f.get_float(key);
          } else if constexpr (std::is_same_v<T, bool>) {
            c.*member = f.get_bool(key);
          } else {
            c.*member = f.get_string(key);
          }
        },
        k.field);
  }
}

// ne of a tensor without trailing 1s, or empty when absent.
std::vector<int64_t> shape_of(const GgufFile& f, const std::string& name) {
  const GgufTensorInfo* t = f.find_tensor(name);
  if (!t) return {};
  std::vector<int64_t> ne = t->ne;
  while (ne.size() > 1 && ne.back() == 1) ne.pop_back();
  return ne;
}

double yarn_get_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// Files converted before llama.cpp's MLA support (no *_mla keys) store the per-head dims of the
// decompressed view in key_length/value_length, but those are only trustworthy alongside
// head_count_kv == head_count; the tensor shapes are, so derive the dims from them.
void derive_head_dims(const GgufFile& f, C& c) {
  if (c.key_length_mla > 0 && c.value_length_mla > 0) {
    c.has_mla_keys = true;
    c.qk_head = c.key_length_mla;
    c.v_head = c.value_length_mla;
    return;
  }
  auto q = shape_of(f, c.q_lora_rank > 0 ? "blk.0.attn_q_b.weight" : "blk.0.attn_q.weight");
  if (q.size() != 2 || q[1] % c.n_head != 0)
    fail("{}: {}: no attention.key_length_mla key and no usable blk.0 query tensor to derive the head size from",
         model_arch_name(c.arch), f.path());
  c.qk_head = q[1] / c.n_head;
  auto v_b = shape_of(f, "blk.0.attn_v_b.weight");
  auto kv_b = shape_of(f, "blk.0.attn_kv_b.weight");
  if (v_b.size() == 3) {
    c.v_head = v_b[1];
  } else if (kv_b.size() == 2 && kv_b[1] % c.n_head == 0) {
    c.v_head = kv_b[1] / c.n_head - (c.qk_head - c.n_rot);
  } else {
    fail("{}: {}: no attention.value_length_mla key and no blk.0 attn_v_b/attn_kv_b tensor to derive v_head_dim from",
         model_arch_name(c.arch), f.path());
  }
}

// Which layers run their own indexer: `<arch>.attention.indexer.types` (one bool per trunk layer,
// true = full) when present; else every layer for deepseek32 and GLM-5/5.1, and GLM-5.2's pattern
// (layers 0 and 1, then every fourth from 2) for glm-dsa files of 1M context, as llama.cpp does.
template <class Bad>
void derive_indexer(const GgufFile& f, C& c, const Bad& bad) {
  c.has_indexer = c.arch != ModelArch::Deepseek2;
  if (!c.has_indexer) return;
  read_keys(f, std::string(model_arch_name(c.arch)) + ".", kIndexerKeys, c);
  if (c.is_lite) bad("the DSA indexer reads the q LoRA latent, but attention.q_lora_rank is absent");
  if (c.n_indexer_head < 1) bad("attention.indexer.head_count is {}, expected >= 1", c.n_indexer_head);
  if (c.indexer_head_dim < c.qk_rope || c.indexer_head_dim % 2)
    bad("attention.indexer.key_length is {}, expected an even value >= rope.dimension_count {}", c.indexer_head_dim,
        c.qk_rope);
  if (c.indexer_top_k < 1) bad("attention.indexer.top_k is {}, expected >= 1", c.indexer_top_k);
  c.indexer_rope = c.arch == ModelArch::GlmDsa ? RopeLayout::Norm : RopeLayout::Neox;
  c.indexer_full.assign(c.n_layer, true);
  const std::string types_key = std::string(model_arch_name(c.arch)) + ".attention.indexer.types";
  if (const GgufValue* v = f.find(types_key)) {
    if (v->type() != GgufValueType::ARRAY)
      bad("'{}' is {}, expected an array of bool", types_key, gguf_value_type_name(v->type()));
    const GgufArray& a = v->as_array();
    if (static_cast<int64_t>(a.items.size()) < c.n_layer)
      bad("'{}' has {} entries, expected one per trunk layer ({})", types_key, a.items.size(), c.n_layer);
    for (int64_t il = 0; il < c.n_layer; ++il)
      c.indexer_full[il] =
          a.items[il].type() == GgufValueType::BOOL ? a.items[il].as_bool() : a.items[il].as_int() != 0;
  } else if (c.arch == ModelArch::GlmDsa && c.n_ctx_train >= 1048576) {
    for (int64_t il = 0; il < c.n_layer; ++il) c.indexer_full[il] = il < 2 || (il - 2) % 4 == 0;
  }
  if (!c.indexer_full[0]) bad("'{}': layer 0 is shared, but a shared layer reuses an earlier full layer", types_key);
}

// The trunk's shape: layer split, widths, head dims and the MLA key/value lengths.
template <class Bad>
void validate_trunk(const GgufFile& f, C& c, const Bad& bad) {
  if (c.n_nextn >= c.n_layer_all)
    bad("nextn_predict_layers {} leaves no trunk layer of block_count {}", c.n_nextn, c.n_layer_all);
  c.n_layer = c.n_layer_all - c.n_nextn;
  if (c.n_layer < 1) bad("block_count is {}, expected >= 1", c.n_layer);
  if (c.n_embd < 1) bad("embedding_length is {}, expected >= 1", c.n_embd);
  if (c.n_head < 1) bad("attention.head_count is {}, expected >= 1", c.n_head);
  if (c.kv_lora_rank < 1) bad("attention.kv_lora_rank is {}, expected >= 1", c.kv_lora_rank);
  if (c.n_rot < 2 || c.n_rot % 2) bad("rope.dimension_count is {}, expected an even value >= 2", c.n_rot);
  if (!(c.rms_eps > 0) || !std::isfinite(c.rms_eps))
    bad("attention.layer_norm_rms_epsilon is {}, expected a finite value > 0", c.rms_eps);
  if (!(c.rope_freq_base > 0) || !std::isfinite(c.rope_freq_base))
    bad("rope.freq_base is {}, expected a finite value > 0", c.rope_freq_base);
  if (c.n_head_kv == 0) c.n_head_kv = c.n_head;
  if (c.n_head_kv != 1 && c.n_head_kv != c.n_head)
    bad("attention.head_count_kv is {}, expected 1 (MLA file) or head_count {}", c.n_head_kv, c.n_head);
  if (c.n_layer_dense_lead > c.n_layer)
    bad("leading_dense_block_count {} exceeds block_count {}", c.n_layer_dense_lead, c.n_layer);

  c.is_lite = c.q_lora_rank == 0;
  derive_head_dims(f, c);
  c.qk_rope = c.n_rot;
  if (c.qk_head <= c.qk_rope)
    bad("key_length_mla {} must exceed rope.dimension_count {} (qk_nope_head_dim >= 1)", c.qk_head, c.qk_rope);
  if (c.v_head < 1) bad("v_head_dim (value_length_mla) is {}, expected >= 1", c.v_head);
  c.qk_nope = c.qk_head - c.qk_rope;
  c.latent_dim = c.kv_lora_rank + c.qk_rope;
  if (c.has_mla_keys && c.n_head_kv == 1) {
    if (c.key_length != 0 && c.key_length != c.latent_dim)
      bad("attention.key_length {} != kv_lora_rank + rope.dimension_count = {}", c.key_length, c.latent_dim);
    if (c.value_length != 0 && c.value_length != c.kv_lora_rank)
      bad("attention.value_length {} != kv_lora_rank {}", c.value_length, c.kv_lora_rank);
  }

  // Vocabulary size: explicit key, else the token list, else the embedding rows.
  if (c.n_vocab == 0) {
    if (const GgufValue* toks = f.find("tokenizer.ggml.tokens"); toks && toks->type() == GgufValueType::ARRAY)
      c.n_vocab = static_cast<int64_t>(toks->as_array().items.size());
    else if (auto e = shape_of(f, "token_embd.weight"); e.size() == 2)
      c.n_vocab = e[1];
  }
  if (c.n_vocab < 1) bad("vocabulary size unknown: no vocab_size key, token list or token_embd tensor");
}

// Dense blocks need feed_forward_length, MoE blocks the expert parameters; the gating function.
template <class Bad>
void validate_ffn(C& c, const Bad& bad) {
  if (c.n_layer_dense_lead > 0 && c.n_ff < 1)
    bad("feed_forward_length is {}, expected >= 1 with {} leading dense blocks", c.n_ff, c.n_layer_dense_lead);
  if (c.n_layer_dense_lead < c.n_layer) {
    if (c.n_expert < 1)
      bad("expert_count is {}, expected >= 1 for MoE blocks (leading_dense_block_count {} < block_count {})",
          c.n_expert, c.n_layer_dense_lead, c.n_layer);
    if (c.n_expert_used < 1 || c.n_expert_used > c.n_expert)
      bad("expert_used_count is {}, expected 1 to expert_count {}", c.n_expert_used, c.n_expert);
    if (c.n_ff_exp < 1) bad("expert_feed_forward_length is {}, expected >= 1", c.n_ff_exp);
    if (c.n_expert_groups < 1) bad("expert_group_count is {}, expected >= 1", c.n_expert_groups);
    if (c.n_expert % c.n_expert_groups != 0)
      bad("expert_count {} is not divisible by expert_group_count {}", c.n_expert, c.n_expert_groups);
    if (c.n_expert_groups_used < 1 || c.n_expert_groups_used > c.n_expert_groups)
      bad("expert_group_used_count is {}, expected 1 to expert_group_count {}", c.n_expert_groups_used,
          c.n_expert_groups);
    const int64_t per_group = c.n_expert / c.n_expert_groups;
    if (c.n_expert_groups > 1 && per_group < 2)
      bad("expert groups of {} expert(s): group scoring sums each group's top-2, expected >= 2 per group", per_group);
    if (c.n_expert_used > c.n_expert_groups_used * per_group)
      bad("expert_used_count {} exceeds the {} experts of the {} selected group(s)", c.n_expert_used,
          c.n_expert_groups_used * per_group, c.n_expert_groups_used);
    if (!std::isfinite(c.expert_weights_scale) || c.expert_weights_scale == 0)
      bad("expert_weights_scale is {}, expected a finite non-zero value", c.expert_weights_scale);
  }
  if (c.expert_gating_func == 0 && c.arch == ModelArch::GlmDsa) c.expert_gating_func = 2;  // GLM-5 routes by sigmoid
  if (c.expert_gating_func == 0 && c.arch == ModelArch::Deepseek32 && c.n_layer_dense_lead < c.n_layer)
    bad("missing required key '{}.expert_gating_func'", model_arch_name(c.arch));
  switch (c.expert_gating_func) {
    case 0:  // absent/none: llama.cpp's default for older DeepSeek-V2 files
    case 1:
      c.gating = MoeGating::Softmax;
      break;
    case 2:
      c.gating = MoeGating::Sigmoid;
      break;
    default:
      bad("expert_gating_func is {}, expected 1 (softmax) or 2 (sigmoid)", c.expert_gating_func);
  }
}

// RoPE and the attention scale, as transformers' DeepseekV3 derives them.
template <class Bad>
void derive_rope(C& c, const Bad& bad) {
  c.rope.n_dims = static_cast<int>(c.qk_rope);
  c.rope.freq_base = c.rope_freq_base;
  c.rope.n_ctx_orig = c.rope_orig_ctx > 0 ? c.rope_orig_ctx : c.n_ctx_train;
  c.rope.beta_fast = c.rope_yarn_beta_fast;
  c.rope.beta_slow = c.rope_yarn_beta_slow;
  if (!(c.rope.beta_fast > c.rope.beta_slow) || !(c.rope.beta_slow > 0))
    bad("rope.scaling.yarn_beta_fast {} / yarn_beta_slow {}: expected beta_fast > beta_slow > 0", c.rope.beta_fast,
        c.rope.beta_slow);
  c.mscale_all_dim = c.rope_yarn_log_mul / 0.1;
  const std::string& type = c.rope_scaling_type;
  if (type.empty() || type == "none") {
    c.rope.freq_scale = 1;
  } else if (type == "linear" || type == "yarn") {
    if (!(c.rope_scaling_factor > 0) || !std::isfinite(c.rope_scaling_factor))
      bad("rope.scaling.factor is {}, expected a finite value > 0 for rope.scaling.type '{}'", c.rope_scaling_factor,
          type);
    c.rope.freq_scale = 1.0 / c.rope_scaling_factor;
    if (type == "yarn") {
      if (c.rope.n_ctx_orig < 1) bad("rope.scaling.original_context_length is missing or 0 for yarn");
      c.rope.ext_factor = 1;
      // transformers: cos/sin carry get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
      // (1 for every DeepSeek config, where mscale == mscale_all_dim; the GGUF does not store
      // mscale, llama.cpp assumes the same), or get_mscale(factor) without mscale_all_dim; the
      // softmax scale gains get_mscale(factor, mscale_all_dim)² when mscale_all_dim is set.
      if (c.mscale_all_dim != 0) {
        c.rope.attn_factor = 1;
        c.attn_mscale = yarn_get_mscale(c.rope_scaling_factor, c.mscale_all_dim);
      } else {
        c.rope.attn_factor = yarn_get_mscale(c.rope_scaling_factor, 1);
      }
    }
  } else {
    bad("rope.scaling.type '{}' is not supported (expected none, linear or yarn)", type);
  }
  c.kq_scale = static_cast<float>(c.attn_mscale * c.attn_mscale / std::sqrt(static_cast<double>(c.qk_head)));
}

void validate_and_derive(const GgufFile& f, C& c) {
  auto bad = [&](std::string_view what, const auto&... args) {
    fail("{}: {}: {}", model_arch_name(c.arch), f.path(), fmt::vformat(what, fmt::make_format_args(args...)));
  };
  validate_trunk(f, c, bad);
  validate_ffn(c, bad);
  derive_rope(c, bad);
  derive_indexer(f, c, bad);
}

}  // namespace

const char* model_arch_name(ModelArch a) {
  switch (a) {
    case ModelArch::Deepseek2:
      return "deepseek2";
    case ModelArch::Deepseek32:
      return "deepseek32";
    case ModelArch::GlmDsa:
      return "glm-dsa";
  }
  return "?";
}

DeepseekConfig load_deepseek_config(const GgufFile& f) {
  const GgufValue* arch = f.find("general.architecture");
  if (!arch || arch->type() != GgufValueType::STRING)
    fail("model: {}: missing string key 'general.architecture'", f.path());
  C c;
  const std::string& name = arch->as_string();
  if (name == "deepseek2")
    c.arch = ModelArch::Deepseek2;
  else if (name == "deepseek32")
    c.arch = ModelArch::Deepseek32;
  else if (name == "glm-dsa")
    c.arch = ModelArch::GlmDsa;
  else if (name == "deepseek4")
    fail(
        "model: {}: general.architecture 'deepseek4' (DeepSeek-V4) is not a deepseek2-family file: mla run, serve "
        "and bench run it; this command does not (docs/DEEPSEEK-V4.md)",
        f.path());
  else
    fail("model: {}: general.architecture is '{}', expected 'deepseek2', 'deepseek32' or 'glm-dsa'", f.path(), name);
  read_keys(f, std::string(name) + ".", kKeys, c);
  validate_and_derive(f, c);
  return c;
}

std::vector<ConfigKeyState> deepseek_config_key_states(const GgufFile& f, const DeepseekConfig& c) {
  std::vector<ConfigKeyState> out;
  for (const auto& k : kKeys) {
    ConfigKeyState st;
    st.key = std::string(model_arch_name(c.arch)) + "." + k.name;
    st.required = k.required;
    st.present = f.has(st.key);
    std::visit(
        [&](auto member) {
          using T = std::remove_reference_t<decltype(c.*member)>;
          if constexpr (std::is_same_v<T, bool>)
            st.value = c.*member ? "true" : "false";
          else if constexpr (std::is_same_v<T, std::string>)
            st.value = c.*member;
          else
            st.value = fmt::format("{}", c.*member);
        },
        k.field);
    out.push_back(std::move(st));
  }
  return out;
}

std::string describe_deepseek_config(const DeepseekConfig& c) {
  std::string s;
  auto line = [&](std::string_view k, const std::string& v) { s += fmt::format("  {:<28} {}\n", k, v); };
  line("architecture", model_arch_name(c.arch));
  line("layers",
       fmt::format("{} ({} dense, {} MoE)", c.n_layer, c.n_layer_dense_lead, c.n_layer - c.n_layer_dense_lead));
  if (c.n_nextn > 0)
    line("MTP (nextn) blocks", fmt::format("{} (blk.{}.., run by --speculative-config)", c.n_nextn, c.n_layer));
  line("embedding", fmt::format("{}", c.n_embd));
  line("vocabulary", fmt::format("{}", c.n_vocab));
  line("context (trained)", fmt::format("{}", c.n_ctx_train));
  line("heads", fmt::format("{} (kv heads in file: {})", c.n_head, c.n_head_kv));
  line("q projection", c.is_lite ? std::string("direct attn_q (lite)") : fmt::format("LoRA rank {}", c.q_lora_rank));
  line("kv_lora_rank", fmt::format("{}", c.kv_lora_rank));
  line("qk_nope / qk_rope / v_head", fmt::format("{} / {} / {}", c.qk_nope, c.qk_rope, c.v_head));
  line("head dims from", c.has_mla_keys ? "key_length_mla / value_length_mla" : "tensor shapes (no _mla keys)");
  line("latent cache row",
       fmt::format("{} floats per token per layer [c_kv {} | k_pe {}]", c.latent_dim, c.kv_lora_rank, c.qk_rope));
  line("rms_eps", fmt::format("{:g}", c.rms_eps));
  line("rope", fmt::format("base {:g}, scaling {}", c.rope_freq_base,
                           c.rope_scaling_type.empty() ? std::string("none") : c.rope_scaling_type));
  if (c.rope_scaling_type == "yarn" || c.rope_scaling_type == "linear") {
    line("rope factor / orig ctx", fmt::format("{:g} / {}", c.rope_scaling_factor, c.rope.n_ctx_orig));
    if (c.rope_scaling_type == "yarn") {
      double dims[2];
      rope_yarn_corr_dims(c.rope, dims);
      line("yarn ramp (pair index)", fmt::format("[{:g}, {:g}], beta_fast {:g}, beta_slow {:g}", dims[0], dims[1],
                                                 c.rope.beta_fast, c.rope.beta_slow));
      line("yarn mscale_all_dim", fmt::format("{:g} (cos/sin amplitude {:g})", c.mscale_all_dim, c.rope.attn_factor));
    }
  }
  line("attention scale", fmt::format("{:.9g} = mscale {:.9g}^2 / sqrt({})", c.kq_scale, c.attn_mscale, c.qk_head));
  if (c.n_layer_dense_lead > 0) line("dense ffn", fmt::format("{}", c.n_ff));
  if (c.n_layer_dense_lead < c.n_layer) {
    line("experts", fmt::format("{} routed (top {}), {} shared, ffn {}", c.n_expert, c.n_expert_used, c.n_expert_shared,
                                c.n_ff_exp));
    line("expert groups", fmt::format("{} (use {})", c.n_expert_groups, c.n_expert_groups_used));
    line("gating",
         fmt::format("{}, weights norm {}, scale {:g}", c.gating == MoeGating::Sigmoid ? "sigmoid" : "softmax",
                     c.expert_weights_norm ? "yes" : "no", c.expert_weights_scale));
  }
  // The cache a token needs at the default F16: every layer's latent row, plus an indexer key in
  // each layer that runs an indexer.
  int64_t n_full = 0;
  for (bool b : c.indexer_full) n_full += b;
  const int64_t latent_bytes = c.n_layer * c.latent_dim * 2, index_bytes = n_full * c.indexer_head_dim * 2;
  const int64_t token_bytes = latent_bytes + index_bytes;
  line("kv cache per token (f16)",
       c.has_indexer
           ? fmt::format("{} B = latent {} B ({} layers x {} x 2) + indexer keys {} B ({} layers x {} x 2)",
                         token_bytes, latent_bytes, c.n_layer, c.latent_dim, index_bytes, n_full, c.indexer_head_dim)
           : fmt::format("{} B = latent {} layers x {} x 2", token_bytes, c.n_layer, c.latent_dim));
  line("kv cache at trained context",
       fmt::format("{:.2f} GiB for {} tokens (f16)", static_cast<double>(token_bytes) * c.n_ctx_train / (1 << 30),
                   c.n_ctx_train));
  if (c.has_indexer) {
    line("DSA indexer", fmt::format("{} heads x {}, top_k {}, rope {}, {} full / {} shared layers", c.n_indexer_head,
                                    c.indexer_head_dim, c.indexer_top_k,
                                    c.indexer_rope == RopeLayout::Neox ? "neox" : "norm", n_full, c.n_layer - n_full));
  }
  return s;
}

}  // namespace mla
