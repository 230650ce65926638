#include "quant/quantize_plan.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include "gguf/gguf.h"
#include "quant/quant.h"
#include "util/error.h"

namespace mla {
namespace {

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }
bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

enum class Role { Output, TokenEmbd, AttnV, AttnK, AttnOutput, FfnDown, Other };

Role role_of(std::string_view name, bool tied_output) {
  if (name == "output.weight") return Role::Output;
  if (name == "token_embd.weight") return tied_output ? Role::Output : Role::TokenEmbd;
  if (contains(name, "attn_qkv.weight") || contains(name, "attn_kv_b.weight") || contains(name, "attn_v.weight") ||
      contains(name, "attn_v_b.weight"))
    return Role::AttnV;
  if (contains(name, "attn_k.weight")) return Role::AttnK;
  if (contains(name, "attn_output.weight")) return Role::AttnOutput;
  if (contains(name, "ffn_down")) return Role::FfnDown;
  return Role::Other;
}

bool quantizable(const GgufTensorInfo& t) {
  const std::string_view name = t.name;
  int n_dims = static_cast<int>(t.ne.size());
  while (n_dims > 1 && t.ne[n_dims - 1] == 1) --n_dims;  // ggml_n_dims ignores trailing 1s
  return n_dims >= 2 && ends_with(name, "weight") && !contains(name, "_norm.weight") &&
         !contains(name, "ffn_gate_inp.weight");
}

// llama.cpp's layer pattern for "more bits": the first and last eighth, and every third between.
bool use_more_bits(int64_t i_layer, int64_t n_layer) {
  return i_layer < n_layer / 8 || i_layer >= 7 * n_layer / 8 || (i_layer - n_layer / 8) % 3 == 2;
}

int64_t layer_of(const std::string& name, int64_t n_layer) {
  int64_t il = -1;
  if (name.rfind("blk.", 0) == 0) {
    const char* b = name.data() + 4;
    const char* e = name.data() + name.size();
    auto [p, ec] = std::from_chars(b, e, il);
    if (ec != std::errc() || p == e || *p != '.') il = -1;
  }
  if (il < 0 || il >= n_layer) fail("quantize: tensor '{}': expected a name 'blk.N.' with N in [0, {})", name, n_layer);
  return il;
}

bool is_float_type(GgmlType t) { return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16; }

}  // namespace

std::optional<QuantFileType> parse_quant_file_type(std::string_view name) {
  std::string s(name);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "f16") return QuantFileType::F16;
  if (s == "q8_0") return QuantFileType::Q8_0;
  if (s == "q4_k_m" || s == "q4_k") return QuantFileType::Q4_K_M;
  if (s == "q5_k_m" || s == "q5_k") return QuantFileType::Q5_K_M;
  if (s == "q6_k") return QuantFileType::Q6_K;
  return std::nullopt;
}

std::string_view quant_file_type_name(QuantFileType t) {
  switch (t) {
    case QuantFileType::F16:
      return "F16";
    case QuantFileType::Q8_0:
      return "Q8_0";
    case QuantFileType::Q4_K_M:
      return "Q4_K_M";
    case QuantFileType::Q5_K_M:
      return "Q5_K_M";
    case QuantFileType::Q6_K:
      return "Q6_K";
  }
  return "?";
}

uint32_t quant_file_type_id(QuantFileType t) {
  switch (t) {  // llama_ftype: MOSTLY_F16 1, MOSTLY_Q8_0 7, MOSTLY_Q4_K_M 15, MOSTLY_Q5_K_M 17, MOSTLY_Q6_K 18
    case QuantFileType::F16:
      return 1;
    case QuantFileType::Q8_0:
      return 7;
    case QuantFileType::Q4_K_M:
      return 15;
    case QuantFileType::Q5_K_M:
      return 17;
    case QuantFileType::Q6_K:
      return 18;
  }
  return 0;
}

GgmlType quant_file_type_base(QuantFileType t) {
  switch (t) {
    case QuantFileType::F16:
      return GgmlType::F16;
    case QuantFileType::Q8_0:
      return GgmlType::Q8_0;
    case QuantFileType::Q4_K_M:
      return GgmlType::Q4_K;
    case QuantFileType::Q5_K_M:
      return GgmlType::Q5_K;
    case QuantFileType::Q6_K:
      return GgmlType::Q6_K;
  }
  return GgmlType::F16;
}

std::vector<TensorQuantPlan> plan_quantization(const GgufFile& f, QuantFileType ft) {
  const std::string arch = f.opt_string("general.architecture").value_or("");
  const int64_t n_expert = arch.empty() ? 0 : f.opt_int(arch + ".expert_count").value_or(0);
  const int64_t n_layer = arch.empty() ? 0 : f.opt_int(arch + ".block_count").value_or(0);
  const bool tied_output = f.find_tensor("output.weight") == nullptr;
  const bool k_mix = ft == QuantFileType::Q4_K_M || ft == QuantFileType::Q5_K_M;
  const GgmlType base = quant_file_type_base(ft);

  int64_t n_attn_v = 0;
  for (const auto& t : f.tensors())
    if (quantizable(t) && role_of(t.name, tied_output) == Role::AttnV) ++n_attn_v;
  int64_t i_attn_v = 0;

  std::vector<TensorQuantPlan> plan;
  plan.reserve(f.tensors().size());
  for (const auto& t : f.tensors()) {
    TensorQuantPlan p{t.name, t.type, t.type, "kept: not a quantizable weight (norm, router, bias or 1-D)"};
    if (!quantizable(t)) {
      plan.push_back(std::move(p));
      continue;
    }
    if (!is_float_type(t.type))
      fail("quantize: tensor '{}' is {}; mla gguf quantize reads F32/F16/BF16 tensors only", t.name,
           ggml_type_name(t.type));
    GgmlType to = base;
    std::string reason = "file type default";
    const int64_t n_cols = t.ne[0];
    switch (role_of(t.name, tied_output)) {
      case Role::Output:
        if (ft != QuantFileType::F16 && ft != QuantFileType::Q8_0) {
          to = n_cols % 256 == 0 ? GgmlType::Q6_K : GgmlType::Q8_0;
          reason = "output: Q6_K for K-quant files";
        }
        break;
      case Role::TokenEmbd:
        break;
      case Role::AttnV:
        if (k_mix && use_more_bits(i_attn_v, n_attn_v)) to = GgmlType::Q6_K, reason = "attention V: more-bits layer";
        if (n_expert == 8 && ft != QuantFileType::F16) to = GgmlType::Q8_0, reason = "attention V: 8-expert model";
        ++i_attn_v;
        break;
      case Role::AttnK:
        if (n_expert == 8 && ft != QuantFileType::F16) to = GgmlType::Q8_0, reason = "attention K: 8-expert model";
        break;
      case Role::AttnOutput:
        if (n_expert == 8 && ft == QuantFileType::Q4_K_M)
          to = GgmlType::Q5_K, reason = "attention output: 8-expert model";
        break;
      case Role::FfnDown:
        if (k_mix && use_more_bits(layer_of(t.name, n_layer), n_layer))
          to = GgmlType::Q6_K, reason = "ffn_down: more-bits layer";
        break;
      case Role::Other:
        break;
    }
    if (n_cols % ggml_traits(to).block_elems != 0) {
      const GgmlType wanted = to;
      to = n_cols % ggml_traits(GgmlType::Q8_0).block_elems == 0 && wanted != GgmlType::Q8_0 ? GgmlType::Q8_0
                                                                                             : GgmlType::F16;
      reason = std::string("fallback: rows of ") + std::to_string(n_cols) + " do not fit " +
               std::string(ggml_type_name(wanted)) + " blocks";
    }
    if (!can_quantize(to)) fail("quantize: mla.cpp cannot write {} (tensor '{}')", ggml_type_name(to), t.name);
    p.to = to;
    p.reason = std::move(reason);
    plan.push_back(std::move(p));
  }
  return plan;
}

}  // namespace mla
