#include "quant/quantize_plan.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>

#include <fmt/format.h>

#include "gguf/gguf.h"
#include "quant/quant.h"
#include "util/error.h"

namespace mla {
namespace {

using FT = QuantFileType;
using GT = GgmlType;

struct FileTypeInfo {
  FT ft;
  std::string_view name;
  uint32_t id;  // llama_ftype
  GT base;
};

constexpr std::array<FileTypeInfo, 26> kFileTypes{{
    {FT::F16, "F16", 1, GT::F16},
    {FT::Q8_0, "Q8_0", 7, GT::Q8_0},
    {FT::Q4_0, "Q4_0", 2, GT::Q4_0},
    {FT::Q5_0, "Q5_0", 8, GT::Q5_0},
    {FT::Q2_K, "Q2_K", 10, GT::Q2_K},
    {FT::Q3_K_S, "Q3_K_S", 11, GT::Q3_K},
    {FT::Q3_K_M, "Q3_K_M", 12, GT::Q3_K},
    {FT::Q3_K_L, "Q3_K_L", 13, GT::Q3_K},
    {FT::Q4_K_S, "Q4_K_S", 14, GT::Q4_K},
    {FT::Q4_K_M, "Q4_K_M", 15, GT::Q4_K},
    {FT::Q5_K_S, "Q5_K_S", 16, GT::Q5_K},
    {FT::Q5_K_M, "Q5_K_M", 17, GT::Q5_K},
    {FT::Q6_K, "Q6_K", 18, GT::Q6_K},
    {FT::IQ4_NL, "IQ4_NL", 25, GT::IQ4_NL},
    {FT::IQ4_XS, "IQ4_XS", 30, GT::IQ4_XS},
    {FT::MXFP4_MOE, "MXFP4_MOE", 38, GT::MXFP4},
    {FT::IQ1_S, "IQ1_S", 24, GT::IQ1_S},
    {FT::IQ1_M, "IQ1_M", 31, GT::IQ1_M},
    {FT::IQ2_XXS, "IQ2_XXS", 19, GT::IQ2_XXS},
    {FT::IQ2_XS, "IQ2_XS", 20, GT::IQ2_XS},
    {FT::IQ2_S, "IQ2_S", 28, GT::IQ2_XS},
    {FT::IQ2_M, "IQ2_M", 29, GT::IQ2_S},
    {FT::IQ3_XXS, "IQ3_XXS", 23, GT::IQ3_XXS},
    {FT::IQ3_XS, "IQ3_XS", 22, GT::IQ3_S},
    {FT::IQ3_S, "IQ3_S", 26, GT::IQ3_S},
    {FT::IQ3_M, "IQ3_M", 27, GT::IQ3_S},
}};

const FileTypeInfo& info(FT ft) {
  for (const auto& i : kFileTypes)
    if (i.ft == ft) return i;
  return kFileTypes[0];
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }
bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

// llama-quantize's tensor categories (first match in this order).
enum class Cat { Output, TokenEmbd, AttnQkv, AttnKvB, AttnV, AttnK, AttnQ, AttnOutput, FfnUp, FfnGate, FfnDown, Other };

Cat category_of(std::string_view name) {
  if (name == "output.weight") return Cat::Output;
  if (name == "token_embd.weight") return Cat::TokenEmbd;
  if (contains(name, "attn_qkv.weight")) return Cat::AttnQkv;
  if (contains(name, "attn_kv_b.weight")) return Cat::AttnKvB;
  if (contains(name, "attn_v.weight")) return Cat::AttnV;
  if (contains(name, "attn_k.weight")) return Cat::AttnK;
  if (contains(name, "attn_q.weight")) return Cat::AttnQ;
  if (contains(name, "attn_output.weight")) return Cat::AttnOutput;
  if (contains(name, "ffn_up")) return Cat::FfnUp;
  if (contains(name, "ffn_gate")) return Cat::FfnGate;
  if (contains(name, "ffn_down")) return Cat::FfnDown;
  return Cat::Other;
}

bool is_attn_v(Cat c) { return c == Cat::AttnV || c == Cat::AttnQkv || c == Cat::AttnKvB; }

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

bool is_float_type(GT t) { return t == GT::F32 || t == GT::F16 || t == GT::BF16; }

// What llama_tensor_get_type needs to know of the model, and its running counters.
struct State {
  int64_t n_expert = 0;  // 0 for a dense model
  int64_t n_gqa = 0;     // head_count / head_count_kv (0 when unknown)
  int64_t n_layer = 0;
  bool tied_output = true;
  int64_t n_attn_v = 0, i_attn_v = 0, i_ffn_down = 0, i_ffn_gate = 0, i_ffn_up = 0;
};

// The (layer, layer count) a ffn tensor is counted in: its name's layer for MoE models, the
// running count of such tensors otherwise (as llama-quantize).
std::pair<int64_t, int64_t> layer_info(const State& s, int64_t counter, const std::string& name) {
  if (std::max<int64_t>(1, s.n_expert) > 1) return {layer_of(name, s.n_layer), s.n_layer};
  return {counter, s.n_layer};
}

bool is_low_iq(FT ft) {
  return ft == FT::IQ2_XXS || ft == FT::IQ2_XS || ft == FT::IQ1_S || ft == FT::IQ2_S || ft == FT::IQ2_M ||
         ft == FT::IQ1_M;
}

// The output head, and a tied token embedding that doubles as it.
GT output_type(GT t, const GgufTensorInfo& tensor, FT ft) {
  const int64_t nx = tensor.ne[0];
  if (ft == FT::MXFP4_MOE || nx % ggml_traits(t).block_elems != 0) return GT::Q8_0;
  if (is_low_iq(ft) || ft == FT::IQ3_XXS) return GT::Q5_K;
  return t != GT::Q8_0 ? GT::Q6_K : t;
}

// The 1-2 bit i-quant file types (IQ2_XXS .. IQ1_M), which bump a few roles.
GT low_iq_type(State& s, GT t, FT ft, Cat cat) {
  const bool iq2s = ft == FT::IQ2_S || ft == FT::IQ2_M;
  if (is_attn_v(cat)) {
    ++s.i_attn_v;
    if (s.n_gqa >= 4 || s.n_expert >= 4) return GT::Q4_K;
    return iq2s ? GT::IQ3_S : GT::Q2_K;
  }
  if (s.n_expert == 8 && cat == Cat::AttnK) return GT::Q4_K;
  if (cat == Cat::FfnDown) {
    // The running count of ffn_down tensors against the layer count, as llama-quantize does.
    if (s.i_ffn_down++ < s.n_layer / 8) return iq2s ? GT::IQ3_S : GT::Q2_K;
    return t;
  }
  if (cat == Cat::AttnOutput) {
    if (s.n_expert == 8) return GT::Q5_K;
    if (ft == FT::IQ1_S || ft == FT::IQ1_M) return GT::IQ2_XXS;
    if (iq2s) return GT::IQ3_S;
  }
  return t;
}

GT attn_v_type(State& s, GT t, FT ft) {
  if (ft == FT::Q2_K) {
    t = s.n_gqa >= 4 ? GT::Q4_K : GT::Q3_K;
  } else if (ft == FT::IQ3_XXS) {
    t = s.n_gqa >= 4 ? GT::Q4_K : GT::IQ3_S;
  } else if (((ft == FT::IQ3_XS || ft == FT::IQ3_S) && s.n_gqa >= 4) || ft == FT::IQ3_M) {
    t = GT::Q4_K;
  } else if (ft == FT::Q3_K_M) {
    t = s.i_attn_v < 2 ? GT::Q5_K : GT::Q4_K;
  } else if (ft == FT::Q3_K_L || ((ft == FT::IQ4_NL || ft == FT::IQ4_XS) && s.n_gqa >= 4) ||
             (ft == FT::Q4_K_S && s.i_attn_v < 4)) {
    t = GT::Q5_K;
  } else if ((ft == FT::Q4_K_M || ft == FT::Q5_K_M) && use_more_bits(s.i_attn_v, s.n_attn_v)) {
    t = GT::Q6_K;
  }
  if (s.n_expert == 8) t = GT::Q8_0;
  ++s.i_attn_v;
  return t;
}

GT ffn_down_type(State& s, GT t, FT ft, const std::string& name) {
  const auto [i_layer, n_layer] = layer_info(s, s.i_ffn_down, name);
  ++s.i_ffn_down;
  if (ft == FT::Q2_K) return GT::Q3_K;
  if (ft == FT::IQ3_XXS) return i_layer < n_layer / 8 ? GT::Q4_K : GT::Q3_K;
  if (ft == FT::Q3_K_M) return i_layer < n_layer / 16 ? GT::Q5_K : GT::Q4_K;
  if (ft == FT::IQ3_M && (i_layer < n_layer / 8 || (s.n_expert == 8 && use_more_bits(i_layer, n_layer))))
    return GT::Q4_K;
  if (ft == FT::Q3_K_L) return GT::Q5_K;
  if (ft == FT::Q4_K_M) return use_more_bits(i_layer, n_layer) ? GT::Q6_K : t;
  if (i_layer < n_layer / 8 && (ft == FT::IQ4_NL || ft == FT::IQ4_XS)) return GT::Q5_K;
  if (ft == FT::Q5_K_M && use_more_bits(i_layer, n_layer)) return GT::Q6_K;
  if (ft == FT::Q4_K_S && i_layer < n_layer / 8) return GT::Q5_K;
  return t;
}

GT attn_output_type(const State& s, GT t, FT ft) {
  if (s.n_expert == 8) {
    if (ft == FT::Q2_K || ft == FT::IQ3_XS || ft == FT::IQ3_XXS || ft == FT::Q3_K_S || ft == FT::Q3_K_M ||
        ft == FT::IQ4_NL || ft == FT::Q4_K_S || ft == FT::Q4_K_M || ft == FT::IQ3_S || ft == FT::IQ3_M ||
        ft == FT::IQ4_XS)
      return GT::Q5_K;
    return t;
  }
  if (ft == FT::Q2_K) return GT::Q3_K;
  if (ft == FT::IQ3_XXS) return GT::IQ3_S;
  if (ft == FT::Q3_K_M || ft == FT::IQ3_M) return GT::Q4_K;
  if (ft == FT::Q3_K_L) return GT::Q5_K;
  return t;
}

// llama_tensor_get_type_impl (no importance matrix, not Falcon, not a 70B llama).
GT role_type(State& s, GT t, const GgufTensorInfo& tensor, FT ft, Cat cat) {
  if (cat == Cat::Output || (s.tied_output && cat == Cat::TokenEmbd)) return output_type(t, tensor, ft);
  if (ft == FT::MXFP4_MOE) {
    // Expert tensors (3-D) MXFP4, the rest Q8_0.
    return tensor.ne.size() > 2 && tensor.ne[2] > 1 ? GT::MXFP4 : GT::Q8_0;
  }
  if (cat == Cat::TokenEmbd) {
    if (ft == FT::IQ2_XXS || ft == FT::IQ2_XS || ft == FT::IQ1_S || ft == FT::IQ1_M) return GT::Q2_K;
    if (ft == FT::IQ2_S || ft == FT::IQ2_M || ft == FT::IQ3_XXS) return GT::IQ3_S;
    return t;
  }
  if (is_low_iq(ft)) return low_iq_type(s, t, ft, cat);
  if (is_attn_v(cat)) return attn_v_type(s, t, ft);
  if (cat == Cat::AttnK || cat == Cat::AttnQ) {
    if (cat == Cat::AttnK && s.n_expert == 8) return GT::Q8_0;
    if (ft == FT::IQ3_XS) return GT::IQ3_XXS;
    if (ft == FT::IQ3_XXS) return GT::IQ2_S;
    return t;
  }
  if (cat == Cat::FfnDown) return ffn_down_type(s, t, ft, tensor.name);
  if (cat == Cat::AttnOutput) return attn_output_type(s, t, ft);
  if (cat == Cat::FfnGate || cat == Cat::FfnUp) {
    int64_t& counter = cat == Cat::FfnGate ? s.i_ffn_gate : s.i_ffn_up;
    const auto [i_layer, n_layer] = layer_info(s, counter, tensor.name);
    ++counter;
    if (ft == FT::IQ3_XS && i_layer >= n_layer / 8 && i_layer < 7 * n_layer / 8) return GT::IQ3_XXS;
  }
  return t;
}

// A type whose block does not divide the row: llama-quantize's fallback chain.
GT fallback(GT t, int64_t n_cols) {
  if (n_cols % ggml_traits(t).block_elems == 0) return t;
  GT to = t;
  switch (t) {
    case GT::IQ1_S:
    case GT::IQ1_M:
    case GT::IQ2_XXS:
    case GT::IQ2_XS:
    case GT::IQ2_S:
    case GT::IQ3_XXS:
    case GT::IQ3_S:
    case GT::IQ4_XS:
    // ik_llama.cpp's types follow its llama-quantize's chain.
    case GT::IQ2_K:
    case GT::IQ2_KS:
    case GT::IQ2_KL:
    case GT::IQ3_K:
    case GT::IQ3_KS:
    case GT::IQ4_KS:
    case GT::IQ4_KSS:
      to = GT::IQ4_NL;
      break;
    case GT::Q2_K:
    case GT::Q3_K:
      to = GT::Q4_0;
      break;
    case GT::Q4_K:
    case GT::IQ4_K:
    case GT::IQ5_KS:
      to = GT::Q5_0;
      break;
    case GT::IQ5_K:
      to = GT::Q6_0;
      break;
    case GT::IQ6_K:
      to = GT::Q8_0;
      break;
    case GT::Q5_K:
      to = GT::Q5_1;
      break;
    case GT::Q6_K:
      to = GT::Q8_0;
      break;
    default:
      break;
  }
  return n_cols % ggml_traits(to).block_elems == 0 ? to : GT::F16;
}

// An integer key, or the first element of a per-layer array; 0 when absent.
int64_t int_or_first(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return 0;
  if (v->type() == GgufValueType::ARRAY) return v->as_array().items.empty() ? 0 : v->as_array().items[0].as_int();
  return v->as_int();
}

}  // namespace

std::optional<QuantFileType> parse_quant_file_type(std::string_view name) {
  const std::string s = lower(name);
  if (s == "q3_k") return FT::Q3_K_M;
  if (s == "q4_k") return FT::Q4_K_M;
  if (s == "q5_k") return FT::Q5_K_M;
  for (const auto& i : kFileTypes)
    if (lower(i.name) == s) return i.ft;
  return std::nullopt;
}

std::string_view quant_file_type_name(QuantFileType t) { return info(t).name; }

std::string quant_file_type_list() {
  std::string out;
  for (const auto& i : kFileTypes) out += (out.empty() ? "" : ", ") + lower(i.name);
  return out + " (q3_k, q4_k, q5_k: the _M types)";
}

uint32_t quant_file_type_id(QuantFileType t) { return info(t).id; }

GgmlType quant_file_type_base(QuantFileType t) { return info(t).base; }

TensorTypeOverride parse_tensor_type_override(std::string_view spec) {
  const size_t eq = spec.rfind('=');
  if (eq == std::string_view::npos)
    fail("--tensor-type '{}': expected PATTERN=TYPE (for example ffn_down_exps=iq3_xxs)", spec);
  const std::string pattern(spec.substr(0, eq));
  const std::string type_name(spec.substr(eq + 1));
  if (pattern.empty()) fail("--tensor-type '{}': the pattern before '=' is empty", spec);
  const auto type = ggml_type_from_name(type_name);
  if (!type) fail("--tensor-type '{}': unknown tensor type '{}'", spec, type_name);
  if (!can_quantize(*type)) fail("--tensor-type '{}': mla.cpp cannot write {} tensors", spec, ggml_type_name(*type));
  try {
    return {pattern, std::regex(pattern), *type};
  } catch (const std::regex_error& e) {
    fail("--tensor-type '{}': bad regular expression '{}' ({})", spec, pattern, e.what());
  }
}

std::vector<TensorQuantPlan> plan_quantization(const GgufFile& f, QuantFileType ft,
                                               const std::vector<TensorTypeOverride>& overrides) {
  const std::string arch = f.opt_string("general.architecture").value_or("");
  State s;
  if (!arch.empty()) {
    s.n_expert = f.opt_int(arch + ".expert_count").value_or(0);
    s.n_layer = f.opt_int(arch + ".block_count").value_or(0);
    const int64_t n_head = int_or_first(f, arch + ".attention.head_count");
    const int64_t n_head_kv = int_or_first(f, arch + ".attention.head_count_kv");
    s.n_gqa = n_head_kv > 0 ? n_head / n_head_kv : 0;
  }
  s.tied_output = f.find_tensor("output.weight") == nullptr;
  const GT base = quant_file_type_base(ft);
  for (const auto& t : f.tensors())
    if (is_attn_v(category_of(t.name))) ++s.n_attn_v;

  std::vector<TensorQuantPlan> plan;
  plan.reserve(f.tensors().size());
  for (const auto& t : f.tensors()) {
    TensorQuantPlan p{t.name, t.type, t.type, "kept: not a quantizable weight (norm, router, bias or 1-D)"};
    if (!quantizable(t)) {
      plan.push_back(std::move(p));
      continue;
    }
    GT to = base;
    std::string reason = "file type default";
    const TensorTypeOverride* manual = nullptr;
    for (const auto& o : overrides)
      if (std::regex_search(t.name, o.re)) {
        manual = &o;
        break;
      }
    if (manual) {
      to = manual->type;
      reason = "--tensor-type " + manual->pattern;
    } else if (base != GT::F16) {
      to = role_type(s, base, t, ft, category_of(t.name));
      if (to != base) reason = "llama-quantize rule for this role and layer";
    }
    const int64_t n_cols = t.ne[0];
    if (const GT fb = fallback(to, n_cols); fb != to) {
      reason = fmt::format("fallback: rows of {} do not fit {} blocks", n_cols, ggml_type_name(to));
      to = fb;
    }
    // A quantized tensor is only kept or dequantized (to F32, F16 or BF16): requantizing would
    // stack two roundings.
    if (!is_float_type(t.type) && to != t.type && !(is_float_type(to) && can_dequantize(t.type)))
      fail(
          "quantize: tensor '{}' is {}; mla gguf quantize quantizes F32/F16/BF16 tensors and dequantizes others "
          "to F32/F16/BF16 only (it would write {})",
          t.name, ggml_type_name(t.type), ggml_type_name(to));
    if (to != t.type && !can_quantize(to))
      fail("quantize: mla.cpp cannot write {} (tensor '{}')", ggml_type_name(to), t.name);
    p.to = to;
    p.reason = std::move(reason);
    plan.push_back(std::move(p));
  }
  return plan;
}

}  // namespace mla
