#include "model/synth.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "gguf/gguf.h"
#include "model/config.h"
#include "model/synth_builder.h"
#include "quant/quant.h"
#include "util/error.h"
#include "util/log.h"

namespace mla {
namespace {

// ---------------------------------------------------------------- spec from JSON

GgmlType type_named(const std::string& s) {
  auto t = ggml_type_from_name(s);
  if (!t) fail("synth: unknown tensor type '{}'", s);
  if (!can_quantize(*t)) fail("synth: tensor type {} cannot be written (no quantizer)", s);
  return *t;
}

MlaLayout layout_named(const std::string& s) {
  if (s == "split") return MlaLayout::Split;
  if (s == "fused") return MlaLayout::Fused;
  fail("synth: layout '{}' is not split or fused", s);
}

const char* const kRoles[] = {"embd", "output",   "attn_q",    "attn_kv_a", "attn_mla", "attn_output",
                              "ffn",  "ffn_exps", "ffn_shexp", "router",    "indexer",  "compressor"};

struct SpecKey {
  const char* name;
  std::function<void(SynthSpec&, const nlohmann::json&)> set;
};

template <typename T>
std::function<void(SynthSpec&, const nlohmann::json&)> field(T SynthSpec::*m) {
  return [m](SynthSpec& s, const nlohmann::json& j) { s.*m = j.get<T>(); };
}

const std::vector<SpecKey>& spec_table() {
  static const std::vector<SpecKey> keys = {
      {"preset", [](SynthSpec& s, const nlohmann::json& j) { apply_synth_preset(s, j.get<std::string>()); }},
      {"arch", field(&SynthSpec::arch)},
      {"n_layer", field(&SynthSpec::n_layer)},
      {"n_layer_dense_lead", field(&SynthSpec::n_layer_dense_lead)},
      {"n_embd", field(&SynthSpec::n_embd)},
      {"n_ff", field(&SynthSpec::n_ff)},
      {"n_head", field(&SynthSpec::n_head)},
      {"q_lora_rank", field(&SynthSpec::q_lora_rank)},
      {"kv_lora_rank", field(&SynthSpec::kv_lora_rank)},
      {"qk_nope", field(&SynthSpec::qk_nope)},
      {"qk_rope", field(&SynthSpec::qk_rope)},
      {"v_head", field(&SynthSpec::v_head)},
      {"n_expert", field(&SynthSpec::n_expert)},
      {"n_expert_used", field(&SynthSpec::n_expert_used)},
      {"n_expert_shared", field(&SynthSpec::n_expert_shared)},
      {"n_ff_exp", field(&SynthSpec::n_ff_exp)},
      {"n_expert_groups", field(&SynthSpec::n_expert_groups)},
      {"n_expert_groups_used", field(&SynthSpec::n_expert_groups_used)},
      {"gating", field(&SynthSpec::gating)},
      {"weights_norm", field(&SynthSpec::weights_norm)},
      {"weights_scale", field(&SynthSpec::weights_scale)},
      {"exp_probs_b", field(&SynthSpec::exp_probs_b)},
      {"n_vocab", field(&SynthSpec::n_vocab)},
      {"n_ctx_train", field(&SynthSpec::n_ctx_train)},
      {"rms_eps", field(&SynthSpec::rms_eps)},
      {"rope_freq_base", field(&SynthSpec::rope_freq_base)},
      {"rope_scaling", field(&SynthSpec::rope_scaling)},
      {"rope_factor", field(&SynthSpec::rope_factor)},
      {"rope_orig_ctx", field(&SynthSpec::rope_orig_ctx)},
      {"yarn_mscale_all_dim", field(&SynthSpec::yarn_mscale_all_dim)},
      {"layout", [](SynthSpec& s, const nlohmann::json& j) { s.layout = layout_named(j.get<std::string>()); }},
      {"mla_keys", field(&SynthSpec::mla_keys)},
      {"tied_output", field(&SynthSpec::tied_output)},
      {"merged_gate_up", field(&SynthSpec::merged_gate_up)},
      {"ik_mla_tensors", field(&SynthSpec::ik_mla_tensors)},
      {"type", [](SynthSpec& s, const nlohmann::json& j) { s.type = type_named(j.get<std::string>()); }},
      {"types",
       [](SynthSpec& s, const nlohmann::json& j) {
         if (!j.is_object()) fail("synth: 'types' must be an object of role: type");
         for (const auto& [role, t] : j.items()) {
           bool known = false;
           for (const char* r : kRoles) known |= role == r;
           if (!known) fail("synth: unknown tensor role '{}' in types", role);
           s.role_types[role] = type_named(t.get<std::string>());
         }
       }},
      {"vocab", field(&SynthSpec::vocab_path)},
      {"chat_template", field(&SynthSpec::chat_template_path)},
      {"n_indexer_head", field(&SynthSpec::n_indexer_head)},
      {"indexer_head_dim", field(&SynthSpec::indexer_head_dim)},
      {"indexer_top_k", field(&SynthSpec::indexer_top_k)},
      {"indexer_types", field(&SynthSpec::indexer_types)},
      {"n_nextn", field(&SynthSpec::n_nextn)},
      {"tiled_experts", field(&SynthSpec::tiled_experts)},
      {"head_dim", field(&SynthSpec::head_dim)},
      {"n_window", field(&SynthSpec::n_window)},
      {"o_groups", field(&SynthSpec::o_groups)},
      {"o_lora_rank", field(&SynthSpec::o_lora_rank)},
      {"compress_ratios", field(&SynthSpec::compress_ratios)},
      {"compress_rope_base", field(&SynthSpec::compress_rope_base)},
      {"n_hash_layers", field(&SynthSpec::n_hash_layers)},
      {"hc_mult", field(&SynthSpec::hc_mult)},
      {"hc_sinkhorn_iters", field(&SynthSpec::hc_sinkhorn_iters)},
      {"swiglu_limit", field(&SynthSpec::swiglu_limit)},
      {"seed", field(&SynthSpec::seed)},
      {"name", field(&SynthSpec::name)},
  };
  return keys;
}

using namespace synth;  // NOLINT(google-build-using-namespace): the writers' shared tools

void check_spec(const SynthSpec& s) {
  auto pos = [](const char* k, int64_t v) {
    if (v < 1) fail("synth: {} is {}, expected >= 1", k, v);
  };
  pos("n_layer", s.n_layer);
  if (s.tiled_experts && s.merged_gate_up) fail("synth: tiled_experts does not apply to merged_gate_up");
  pos("n_embd", s.n_embd);
  pos("n_head", s.n_head);
  pos("kv_lora_rank", s.kv_lora_rank);
  pos("qk_nope", s.qk_nope);
  pos("v_head", s.v_head);
  pos("n_vocab", s.n_vocab);
  pos("n_ctx_train", s.n_ctx_train);
  if (s.qk_rope < 2 || s.qk_rope % 2) fail("synth: qk_rope is {}, expected an even value >= 2", s.qk_rope);
  if (s.q_lora_rank < 0) fail("synth: q_lora_rank is {}, expected >= 0 (0: lite)", s.q_lora_rank);
  if (s.n_layer_dense_lead < 0 || s.n_layer_dense_lead > s.n_layer)
    fail("synth: n_layer_dense_lead is {}, expected 0 to n_layer {}", s.n_layer_dense_lead, s.n_layer);
  if (s.n_layer_dense_lead > 0) pos("n_ff", s.n_ff);
  if (s.n_layer_dense_lead < s.n_layer) {
    pos("n_expert", s.n_expert);
    pos("n_expert_used", s.n_expert_used);
    pos("n_ff_exp", s.n_ff_exp);
    pos("n_expert_groups", s.n_expert_groups);
  }
  if (s.arch != "deepseek2" && s.arch != "deepseek32" && s.arch != "glm-dsa")
    fail("synth: arch '{}' is not deepseek2, deepseek32 or glm-dsa", s.arch);
  if (s.ik_mla_tensors && s.layout != MlaLayout::Fused)
    fail("synth: ik_mla_tensors adds attn_k_b/attn_v_b beside attn_kv_b: it needs layout fused");
  if (s.arch != "deepseek2") {
    pos("n_indexer_head", s.n_indexer_head);
    pos("indexer_top_k", s.indexer_top_k);
    pos("q_lora_rank (the indexer reads the q LoRA latent)", s.q_lora_rank);
    if (s.indexer_head_dim < s.qk_rope || s.indexer_head_dim % 2)
      fail("synth: indexer_head_dim is {}, expected an even value >= qk_rope {}", s.indexer_head_dim, s.qk_rope);
    if (!s.indexer_types.empty() &&
        (static_cast<int64_t>(s.indexer_types.size()) != s.n_layer || s.indexer_types[0] != '1' ||
         s.indexer_types.find_first_not_of("01") != std::string::npos))
      fail("synth: indexer_types '{}' must be one 0/1 per layer ({}), starting with 1", s.indexer_types, s.n_layer);
  }
  if (s.n_nextn < 0) fail("synth: n_nextn is {}, expected >= 0", s.n_nextn);
  if (s.gating != "softmax" && s.gating != "sigmoid") fail("synth: gating '{}' is not softmax or sigmoid", s.gating);
  if (s.rope_scaling != "none" && s.rope_scaling != "linear" && s.rope_scaling != "yarn")
    fail("synth: rope_scaling '{}' is not none, linear or yarn", s.rope_scaling);
}

}  // namespace

void apply_synth_preset(SynthSpec& s, const std::string& preset) {
  if (preset == "glm5") {
    s.arch = "glm-dsa";
    s.name = "synthetic GLM-5 widths";
    s.n_embd = 6144, s.n_head = 64, s.q_lora_rank = 2048, s.kv_lora_rank = 512;
    s.qk_nope = 192, s.qk_rope = 64, s.v_head = 256;
    s.n_ff = 12288, s.n_ff_exp = 2048, s.n_expert_used = 8, s.n_expert_shared = 1;
    s.n_expert_groups = 1, s.n_expert_groups_used = 1;
    s.n_indexer_head = 32, s.indexer_head_dim = 128, s.indexer_top_k = 2048;
    s.n_vocab = 154880, s.n_ctx_train = 202752, s.rms_eps = 1e-5, s.rope_freq_base = 1e6;
    s.rope_scaling = "none";
  } else if (preset == "deepseek32") {
    s.arch = "deepseek32";
    s.name = "synthetic DeepSeek-V3.2 widths";
    s.n_embd = 7168, s.n_head = 128, s.q_lora_rank = 1536, s.kv_lora_rank = 512;
    s.qk_nope = 128, s.qk_rope = 64, s.v_head = 128;
    s.n_ff = 18432, s.n_ff_exp = 2048, s.n_expert_used = 8, s.n_expert_shared = 1;
    s.n_expert_groups = 8, s.n_expert_groups_used = 4;
    s.n_indexer_head = 64, s.indexer_head_dim = 128, s.indexer_top_k = 2048;
    s.n_vocab = 129280, s.n_ctx_train = 163840, s.rms_eps = 1e-6, s.rope_freq_base = 10000;
    s.rope_scaling = "yarn", s.rope_factor = 40, s.rope_orig_ctx = 4096, s.yarn_mscale_all_dim = 1.0;
  } else if (preset == "v2lite") {
    // DeepSeek-V2-Lite's widths and routing (softmax gating, no selection bias, no group limit),
    // all 64 experts, 4 layers; with q_lora on purpose (llama.cpp tells a q_lora-less file by its
    // layer count, 27). The V2 vocabulary comes from --vocab (ggml-vocab-deepseek-llm.gguf).
    s.arch = "deepseek2";
    s.name = "synthetic DeepSeek-V2-Lite widths";
    s.n_embd = 2048, s.n_head = 16, s.q_lora_rank = 1536, s.kv_lora_rank = 512;
    s.qk_nope = 128, s.qk_rope = 64, s.v_head = 128;
    s.n_ff = 10944, s.n_ff_exp = 1408, s.n_expert = 64, s.n_expert_used = 6, s.n_expert_shared = 2;
    s.n_expert_groups = 1, s.n_expert_groups_used = 1;
    s.n_vocab = 102400, s.n_ctx_train = 163840, s.rms_eps = 1e-6, s.rope_freq_base = 10000;
    s.rope_scaling = "yarn", s.rope_factor = 40, s.rope_orig_ctx = 4096, s.yarn_mscale_all_dim = 0.707;
    s.n_layer = 4, s.n_layer_dense_lead = 1;
    s.gating = "softmax", s.weights_norm = false, s.weights_scale = 1.0, s.exp_probs_b = false;
    s.type = GgmlType::F16;
    return;
  } else if (preset == "v4flash") {
    s.arch = "deepseek4";
    s.name = "synthetic DeepSeek-V4-Flash widths";
    s.n_embd = 4096, s.n_head = 64, s.head_dim = 512, s.qk_rope = 64, s.q_lora_rank = 1024;
    s.o_groups = 8, s.o_lora_rank = 1024, s.n_window = 128;
    s.n_expert = 256, s.n_expert_used = 6, s.n_expert_shared = 1, s.n_ff_exp = 2048, s.weights_scale = 1.5;
    s.n_indexer_head = 64, s.indexer_head_dim = 128, s.indexer_top_k = 512;
    s.n_vocab = 129280, s.n_ctx_train = 1048576, s.rms_eps = 1e-6, s.rope_freq_base = 10000;
    s.compress_rope_base = 160000, s.rope_scaling = "yarn", s.rope_factor = 16, s.rope_orig_ctx = 65536;
    s.hc_mult = 4, s.hc_sinkhorn_iters = 20, s.swiglu_limit = 10;
    s.n_layer = 2, s.compress_ratios = "4,128", s.n_hash_layers = 1;
    s.type = GgmlType::Q8_0;
    s.role_types["ffn_exps"] = GgmlType::MXFP4;
    return;
  } else {
    fail("synth: unknown preset '{}' (expected glm5, deepseek32, v2lite or v4flash)", preset);
  }
  // Fewer layers and experts than the real models: real per-layer cost, a file that fits here.
  s.n_layer = 2, s.n_layer_dense_lead = 1, s.n_expert = 16;
  s.gating = "sigmoid", s.weights_norm = true, s.weights_scale = 2.5, s.exp_probs_b = true;
  s.type = GgmlType::Q4_K;
}

const std::vector<std::string>& synth_spec_keys() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& k : spec_table()) n.push_back(k.name);
    return n;
  }();
  return names;
}

void apply_synth_json(SynthSpec& s, const nlohmann::json& j) {
  if (!j.is_object()) fail("synth: the config must be a JSON object");
  if (j.contains("preset")) {  // first, so that the other keys override it
    if (!j["preset"].is_string()) fail("synth: config key 'preset' must be a string");
    apply_synth_preset(s, j["preset"].get<std::string>());
  }
  for (const auto& [key, value] : j.items()) {
    if (key == "preset") continue;
    const SpecKey* found = nullptr;
    for (const auto& k : spec_table())
      if (key == k.name) found = &k;
    if (!found) fail("synth: unknown config key '{}'", key);
    try {
      found->set(s, value);
    } catch (const nlohmann::json::exception& e) {
      fail("synth: config key '{}': {}", key, e.what());
    }
  }
}

namespace {

// The GGUF keys of the spec (and the vocabulary, which may change n_vocab).
void write_synth_keys(const SynthSpec& s, GgufWriter& w, int64_t& n_vocab) {
  const std::string a = s.arch + ".";
  w.set("general.architecture", GgufValue::str(s.arch));
  w.set("general.name", GgufValue::str(s.name));
  auto u32 = [](int64_t v) { return GgufValue::u32(static_cast<uint32_t>(v)); };
  auto f32 = [](double v) { return GgufValue::f32(static_cast<float>(v)); };
  const bool moe = s.n_layer_dense_lead < s.n_layer;
  const int64_t qk_head = s.qk_nope + s.qk_rope;
  w.set(a + "block_count", u32(s.n_layer + s.n_nextn));
  if (s.n_nextn > 0) w.set(a + "nextn_predict_layers", u32(s.n_nextn));
  const bool dsa = s.arch != "deepseek2";
  if (dsa) {
    w.set(a + "attention.indexer.head_count", u32(s.n_indexer_head));
    w.set(a + "attention.indexer.key_length", u32(s.indexer_head_dim));
    w.set(a + "attention.indexer.top_k", u32(s.indexer_top_k));
    if (!s.indexer_types.empty()) {
      std::vector<GgufValue> types;
      for (char ch : s.indexer_types) types.push_back(GgufValue::boolean(ch == '1'));
      w.set(a + "attention.indexer.types", GgufValue::array(GgufValueType::BOOL, std::move(types)));
    }
  }
  w.set(a + "context_length", u32(s.n_ctx_train));
  w.set(a + "embedding_length", u32(s.n_embd));
  w.set(a + "feed_forward_length", u32(s.n_ff));
  w.set(a + "attention.head_count", u32(s.n_head));
  w.set(a + "attention.head_count_kv", u32(s.mla_keys ? 1 : s.n_head));
  w.set(a + "rope.freq_base", f32(s.rope_freq_base));
  w.set(a + "attention.layer_norm_rms_epsilon", f32(s.rms_eps));
  if (moe) {
    w.set(a + "expert_used_count", u32(s.n_expert_used));
    w.set(a + "expert_group_count", u32(s.n_expert_groups));
    w.set(a + "expert_group_used_count", u32(s.n_expert_groups_used));
  }
  w.set(a + "leading_dense_block_count", u32(s.n_layer_dense_lead));
  if (s.q_lora_rank > 0) w.set(a + "attention.q_lora_rank", u32(s.q_lora_rank));
  w.set(a + "attention.kv_lora_rank", u32(s.kv_lora_rank));
  w.set(a + "attention.key_length", u32(s.mla_keys ? s.kv_lora_rank + s.qk_rope : qk_head));
  w.set(a + "attention.value_length", u32(s.mla_keys ? s.kv_lora_rank : s.v_head));
  if (s.mla_keys) {
    w.set(a + "attention.key_length_mla", u32(qk_head));
    w.set(a + "attention.value_length_mla", u32(s.v_head));
  }
  if (moe) {
    w.set(a + "expert_feed_forward_length", u32(s.n_ff_exp));
    w.set(a + "expert_count", u32(s.n_expert));
    w.set(a + "expert_shared_count", u32(s.n_expert_shared));
    w.set(a + "expert_weights_scale", f32(s.weights_scale));
    w.set(a + "expert_weights_norm", GgufValue::boolean(s.weights_norm));
    w.set(a + "expert_gating_func", u32(s.gating == "sigmoid" ? 2 : 1));
  }
  w.set(a + "rope.dimension_count", u32(s.qk_rope));
  if (s.rope_scaling != "none") {
    w.set(a + "rope.scaling.type", GgufValue::str(s.rope_scaling));
    w.set(a + "rope.scaling.factor", f32(s.rope_factor));
    if (s.rope_scaling == "yarn") {
      w.set(a + "rope.scaling.original_context_length", u32(s.rope_orig_ctx));
      if (s.yarn_mscale_all_dim != 0) w.set(a + "rope.scaling.yarn_log_multiplier", f32(0.1 * s.yarn_mscale_all_dim));
    }
  }
  copy_vocab_and_template(s, w, n_vocab);
  w.set(a + "vocab_size", u32(n_vocab));
}

// Layer il's attention: norm, indexer (DSA), query and latent projections, MLA up-projections in
// the spec's layout, output projection.
void add_synth_attention(Builder& b, const SynthSpec& s, int64_t il) {
  const int64_t E = s.n_embd, H = s.n_head, R = s.kv_lora_rank, N = s.qk_nope, V = s.v_head;
  const int64_t qk_head = s.qk_nope + s.qk_rope;
  const bool dsa = s.arch != "deepseek2";
  auto n = [&](const char* t, const char* suffix = "weight") { return fmt::format("blk.{}.{}.{}", il, t, suffix); };
  b.norm(n("attn_norm"), E);
  const bool full_indexer = il >= s.n_layer || s.indexer_types.empty() || s.indexer_types[il] == '1';
  if (dsa && full_indexer) {
    const int64_t Hi = s.n_indexer_head, Di = s.indexer_head_dim;
    b.matrix(n("indexer.attn_q_b"), "indexer", {s.q_lora_rank, Hi * Di});
    b.matrix(n("indexer.attn_k"), "indexer", {E, Di});
    b.norm(n("indexer.k_norm"), Di);
    b.add(n("indexer.k_norm", "bias"), "", {Di}, normals(s, n("indexer.k_norm", "bias"), Di, 0.1));
    b.matrix(n("indexer.proj"), "indexer", {E, Hi});
  }
  if (s.q_lora_rank > 0) {
    b.matrix(n("attn_q_a"), "attn_q", {E, s.q_lora_rank});
    b.norm(n("attn_q_a_norm"), s.q_lora_rank);
    b.matrix(n("attn_q_b"), "attn_q", {s.q_lora_rank, H * qk_head});
  } else {
    b.matrix(n("attn_q"), "attn_q", {E, H * qk_head});
  }
  b.matrix(n("attn_kv_a_mqa"), "attn_kv_a", {E, R + s.qk_rope});
  b.norm(n("attn_kv_a_norm"), R);
  // The MLA projections from one set of values whatever the layout: W_UK [H][N][R], W_UV [H][V][R].
  const double sd = 1.0 / std::sqrt(static_cast<double>(R));
  std::vector<float> uk_t = normals(s, n("mla_uk"), H * N * R, sd);
  std::vector<float> uv = normals(s, n("mla_uv"), H * V * R, sd);
  std::vector<float> uk(uk_t.size());  // W_UK as attn_k_b holds it: [H][R][N]
  for (int64_t h = 0; h < H; ++h)
    for (int64_t d = 0; d < N; ++d)
      for (int64_t r = 0; r < R; ++r) uk[(h * R + r) * N + d] = uk_t[(h * N + d) * R + r];
  if (s.layout == MlaLayout::Split) {
    b.add(n("attn_k_b"), "attn_mla", {N, R, H}, uk);
    b.add(n("attn_v_b"), "attn_mla", {R, V, H}, uv);
  } else {
    std::vector<float> kv(static_cast<size_t>(H * (N + V) * R));
    for (int64_t h = 0; h < H; ++h) {
      std::copy(uk_t.begin() + h * N * R, uk_t.begin() + (h + 1) * N * R, kv.begin() + h * (N + V) * R);
      std::copy(uv.begin() + h * V * R, uv.begin() + (h + 1) * V * R, kv.begin() + (h * (N + V) + N) * R);
    }
    b.add(n("attn_kv_b"), "attn_mla", {R, H * (N + V)}, kv);
    if (s.ik_mla_tensors) {  // the same values, as ik's converter splits attn_kv_b
      b.add(n("attn_k_b"), "attn_mla", {N, H * R}, uk);
      b.add(n("attn_v_b"), "attn_mla", {R, H * V}, uv);
    }
  }
  b.matrix(n("attn_output"), "attn_output", {H * V, E});
}

// Layer il's FFN: dense for the leading layers, else router, routed and shared experts.
void add_synth_ffn(Builder& b, const SynthSpec& s, int64_t il) {
  const int64_t E = s.n_embd;
  auto n = [&](const char* t, const char* suffix = "weight") { return fmt::format("blk.{}.{}.{}", il, t, suffix); };
  b.norm(n("ffn_norm"), E);
  if (il < s.n_layer_dense_lead) {
    b.matrix(n("ffn_gate"), "ffn", {E, s.n_ff});
    b.matrix(n("ffn_up"), "ffn", {E, s.n_ff});
    b.matrix(n("ffn_down"), "ffn", {s.n_ff, E});
    return;
  }
  const int64_t X = s.n_expert, F = s.n_ff_exp;
  b.matrix(n("ffn_gate_inp"), "router", {E, X});
  if (s.exp_probs_b) {
    Normal g(s.seed, n("exp_probs_b", "bias"));
    std::vector<float> bias(static_cast<size_t>(X));
    for (auto& x : bias) x = static_cast<float>(0.05 * (2 * g.uniform() - 1));
    b.add(n("exp_probs_b", "bias"), "", {X}, bias);
  }
  if (s.merged_gate_up) {
    // Same values as the separate tensors: per expert, gate rows then up rows.
    auto gate = normals(s, n("ffn_gate_exps"), E * F * X, 1.0 / std::sqrt(static_cast<double>(E)));
    auto up = normals(s, n("ffn_up_exps"), E * F * X, 1.0 / std::sqrt(static_cast<double>(E)));
    std::vector<float> gu(static_cast<size_t>(2 * E * F * X));
    for (int64_t e = 0; e < X; ++e) {
      std::copy(gate.begin() + e * F * E, gate.begin() + (e + 1) * F * E, gu.begin() + 2 * e * F * E);
      std::copy(up.begin() + e * F * E, up.begin() + (e + 1) * F * E, gu.begin() + (2 * e + 1) * F * E);
    }
    b.add(n("ffn_gate_up_exps"), "ffn_exps", {E, 2 * F, X}, gu);
  } else {
    b.matrix(n("ffn_gate_exps"), "ffn_exps", {E, F, X});
    b.matrix(n("ffn_up_exps"), "ffn_exps", {E, F, X});
  }
  b.matrix(n("ffn_down_exps"), "ffn_exps", {F, E, X});
  if (s.n_expert_shared > 0) {
    const int64_t S = F * s.n_expert_shared;
    b.matrix(n("ffn_gate_shexp"), "ffn_shexp", {E, S});
    b.matrix(n("ffn_up_shexp"), "ffn_shexp", {E, S});
    b.matrix(n("ffn_down_shexp"), "ffn_shexp", {S, E});
  }
}

}  // namespace

void write_synth_deepseek2(const SynthSpec& s, const std::string& path) {
  if (s.arch == "deepseek4") {
    write_synth_deepseek4(s, path);
    return;
  }
  check_spec(s);
  GgufWriter w;
  int64_t n_vocab = s.n_vocab;
  write_synth_keys(s, w, n_vocab);

  Builder b(s, w);
  const int64_t E = s.n_embd;
  b.add("token_embd.weight", "embd", {E, n_vocab}, normals(s, "token_embd.weight", E * n_vocab, 1.0));
  b.norm("output_norm.weight", E);
  if (!s.tied_output) b.matrix("output.weight", "output", {E, n_vocab});
  for (int64_t il = 0; il < s.n_layer + s.n_nextn; ++il) {
    if (il >= s.n_layer) {  // an MTP block: its own input projection and norms, then a full block
      auto n = [&](const char* t) { return fmt::format("blk.{}.{}.weight", il, t); };
      b.matrix(n("nextn.eh_proj"), "attn_output", {2 * E, E});
      b.norm(n("nextn.enorm"), E);
      b.norm(n("nextn.hnorm"), E);
      b.norm(n("nextn.shared_head_norm"), E);
    }
    add_synth_attention(b, s, il);
    add_synth_ffn(b, s, il);
  }
  w.write(path);
}

// ---------------------------------------------------------------- layout conversion

namespace {

bool exact_float_type(GgmlType t) { return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16; }

// The type for a re-laid-out tensor built from `src`-typed values with rows of `row` elements.
GgmlType relayout_type(GgmlType src, int64_t row, bool keep_quant) {
  if ((exact_float_type(src) || keep_quant) && row % ggml_traits(src).block_elems == 0) return src;
  return GgmlType::F32;
}

std::vector<float> to_f32(const GgufTensorInfo& t) {
  std::vector<float> out(static_cast<size_t>(t.n_elements));
  const int64_t rb = ggml_row_bytes(t.type, t.ne[0]);
  for (int64_t r = 0; r < t.n_rows(); ++r) dequantize_row(t.type, t.data + r * rb, out.data() + r * t.ne[0], t.ne[0]);
  return out;
}

}  // namespace

void convert_mla_layout(const std::string& in_path, const std::string& out_path, MlaLayout target,
                        bool keep_quant_type) {
  auto f = GgufFile::open(in_path);
  DeepseekConfig c = load_deepseek_config(*f);
  const int64_t H = c.n_head, R = c.kv_lora_rank, N = c.qk_nope, V = c.v_head;
  GgufWriter w;
  w.copy_metadata_from(*f);
  int converted = 0;
  for (const auto& t : f->tensors()) {
    std::string name = t.name;
    auto layer_name = [&](const std::string& suffix) {
      return name.substr(0, name.find('.', 4) + 1) + suffix;  // "blk.N." + suffix
    };
    const bool is_kb = name.rfind("blk.", 0) == 0 && name.ends_with(".attn_k_b.weight");
    const bool is_vb = name.rfind("blk.", 0) == 0 && name.ends_with(".attn_v_b.weight");
    const bool is_kvb = name.rfind("blk.", 0) == 0 && name.ends_with(".attn_kv_b.weight");
    // A file of ik_llama.cpp's converter carries both forms (attn_kv_b and a 2-D attn_k_b /
    // attn_v_b): the copy holds the target form made from the other, in place of the file's own.
    if (target == MlaLayout::Fused && is_kvb && f->find_tensor(layer_name("attn_k_b.weight"))) continue;
    if (target == MlaLayout::Split && (is_kb || is_vb) && f->find_tensor(layer_name("attn_kv_b.weight"))) continue;
    if (target == MlaLayout::Fused && is_vb) continue;  // emitted with attn_k_b
    if (target == MlaLayout::Fused && is_kb) {
      const GgufTensorInfo* vb = f->find_tensor(layer_name("attn_v_b.weight"));
      if (!vb) fail("convert: {}: '{}' has no matching attn_v_b", in_path, name);
      // llama.cpp's 3-D shapes or ik_llama.cpp's 2-D ones: the same bytes.
      const bool k_ok = t.ne == std::vector<int64_t>{N, R, H} || t.ne == std::vector<int64_t>{N, H * R};
      const bool v_ok = vb->ne == std::vector<int64_t>{R, V, H} || vb->ne == std::vector<int64_t>{R, H * V};
      if (!k_ok || !v_ok)
        fail("convert: {}: '{}' {} / attn_v_b {} do not match the config's {{{}, {}, {}}} / {{{}, {}, {}}}", in_path,
             name, t.shape_string(), vb->shape_string(), N, R, H, R, V, H);
      std::vector<float> uk = to_f32(t), uv = to_f32(*vb);
      std::vector<float> kv(static_cast<size_t>(H * (N + V) * R));
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t d = 0; d < N; ++d)
          for (int64_t r = 0; r < R; ++r) kv[(h * (N + V) + d) * R + r] = uk[(h * R + r) * N + d];
        std::copy(uv.begin() + h * V * R, uv.begin() + (h + 1) * V * R, kv.begin() + (h * (N + V) + N) * R);
      }
      GgmlType type = t.type == vb->type ? relayout_type(t.type, R, keep_quant_type) : GgmlType::F32;
      w.add_tensor(layer_name("attn_kv_b.weight"), type, {R, H * (N + V)}, encode(type, kv, R));
      ++converted;
      continue;
    }
    if (target == MlaLayout::Split && is_kvb) {
      if (t.ne != std::vector<int64_t>{R, H * (N + V)})
        fail("convert: {}: '{}' is {}, the config needs {{{}, {}}}", in_path, name, t.shape_string(), R, H * (N + V));
      // attn_v_b rows are whole rows of attn_kv_b: moved unchanged, in the source type.
      const int64_t rb = ggml_row_bytes(t.type, R);
      std::vector<uint8_t> vb(static_cast<size_t>(H * V * rb));
      for (int64_t h = 0; h < H; ++h)
        std::memcpy(vb.data() + h * V * rb, t.data + (h * (N + V) + N) * rb, static_cast<size_t>(V * rb));
      std::vector<float> kv = to_f32(t);
      std::vector<float> uk(static_cast<size_t>(H * R * N));
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < N; ++d)
          for (int64_t r = 0; r < R; ++r) uk[(h * R + r) * N + d] = kv[(h * (N + V) + d) * R + r];
      GgmlType ktype = relayout_type(t.type, N, keep_quant_type);
      w.add_tensor(layer_name("attn_k_b.weight"), ktype, {N, R, H}, encode(ktype, uk, N));
      w.add_tensor(layer_name("attn_v_b.weight"), t.type, {R, V, H}, std::move(vb));
      ++converted;
      continue;
    }
    // Unchanged: streamed from f's mapping at write time (f outlives w.write), not copied into memory.
    w.add_tensor_ref(name, t.type, t.ne, t.data, static_cast<size_t>(t.n_bytes));
  }
  if (converted == 0)
    fail("convert: {}: no {} MLA tensors to convert (already {}?)", in_path,
         target == MlaLayout::Fused ? "attn_k_b/attn_v_b" : "attn_kv_b",
         target == MlaLayout::Fused ? "fused" : "split");
  // Every block carries MLA weights, the MTP (nextn) blocks too: all of them change layout.
  if (converted != c.n_layer_all)
    fail("convert: {}: converted {} of {} blocks (mixed layouts?)", in_path, converted, c.n_layer_all);
  w.write(out_path);
}

}  // namespace mla
