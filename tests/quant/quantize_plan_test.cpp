// The per-tensor type rules of `mla gguf quantize` against the types llama.cpp's
// llama_tensor_get_type picks (expected values worked out by hand from llama-quant.cpp in the
// llama-cpp-python 0.3.36 sdist; the mla.cpp-specific choices are marked).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "quant/quantize_plan.h"
#include "util/error.h"

namespace mla {
namespace {

struct Spec {
  int64_t n_layer = 3, n_expert = 8;
  GgmlType weight_type = GgmlType::F16;
  bool tied = false;
  bool kv_b = false;  // also the older attn_kv_b (attention-V-like for llama-quantize)
};

// A deepseek2 file shaped like models/tiny (hidden 256, q/kv lora 256, 4 heads, qk_nope 32,
// v_head 64, dense ffn 768, experts of 256, vocab 4096), tensors zero-filled.
std::vector<uint8_t> make_file(const Spec& s) {
  GgufWriter w;
  w.set("general.architecture", GgufValue::str("deepseek2"));
  w.set("deepseek2.block_count", GgufValue::u32(static_cast<uint32_t>(s.n_layer)));
  w.set("deepseek2.expert_count", GgufValue::u32(static_cast<uint32_t>(s.n_expert)));
  auto add = [&](const std::string& name, std::vector<int64_t> ne, GgmlType t) {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    w.add_tensor(name, t, ne, std::vector<uint8_t>(static_cast<size_t>(ggml_row_bytes(t, ne[0]) * (n / ne[0]))));
  };
  const GgmlType W = s.weight_type;
  add("token_embd.weight", {256, 4096}, W);
  for (int64_t il = 0; il < s.n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    add(b + "attn_norm.weight", {256}, GgmlType::F32);
    add(b + "attn_q_a.weight", {256, 256}, W);
    add(b + "attn_q_a_norm.weight", {256}, GgmlType::F32);
    add(b + "attn_q_b.weight", {256, 256}, W);
    add(b + "attn_kv_a_mqa.weight", {256, 288}, W);
    add(b + "attn_kv_a_norm.weight", {256}, GgmlType::F32);
    if (s.kv_b) add(b + "attn_kv_b.weight", {256, 384}, W);
    add(b + "attn_k_b.weight", {32, 256, 4}, W);
    add(b + "attn_v_b.weight", {256, 64, 4}, W);
    add(b + "attn_output.weight", {256, 256}, W);
    add(b + "ffn_norm.weight", {256}, GgmlType::F32);
    if (il == 0) {
      add(b + "ffn_gate.weight", {256, 768}, W);
      add(b + "ffn_up.weight", {256, 768}, W);
      add(b + "ffn_down.weight", {768, 256}, W);
    } else {
      add(b + "ffn_gate_inp.weight", {256, s.n_expert}, GgmlType::F32);
      add(b + "exp_probs_b.bias", {s.n_expert}, GgmlType::F32);
      add(b + "ffn_gate_exps.weight", {256, 256, s.n_expert}, W);
      add(b + "ffn_up_exps.weight", {256, 256, s.n_expert}, W);
      add(b + "ffn_down_exps.weight", {256, 256, s.n_expert}, W);
      add(b + "ffn_gate_shexp.weight", {256, 256}, W);
      add(b + "ffn_up_shexp.weight", {256, 256}, W);
      add(b + "ffn_down_shexp.weight", {256, 256}, W);
    }
  }
  add("output_norm.weight", {256}, GgmlType::F32);
  if (!s.tied) add("output.weight", {256, 4096}, W);
  return w.to_bytes();
}

std::map<std::string, GgmlType> plan_of(const Spec& s, QuantFileType ft,
                                        const std::vector<std::string>& overrides = {}) {
  const std::vector<uint8_t> bytes = make_file(s);
  auto f = GgufFile::parse(bytes.data(), bytes.size());
  std::vector<TensorTypeOverride> parsed;
  for (const auto& o : overrides) parsed.push_back(parse_tensor_type_override(o));
  std::map<std::string, GgmlType> out;
  for (const auto& p : plan_quantization(*f, ft, parsed)) out[p.name] = p.to;
  return out;
}

TEST(QuantizePlan, Q4KMOnTheTinyModel) {
  auto p = plan_of(Spec{}, QuantFileType::Q4_K_M);
  EXPECT_EQ(p["output.weight"], GgmlType::Q6_K);
  EXPECT_EQ(p["token_embd.weight"], GgmlType::Q4_K);  // untied: the file type's default
  EXPECT_EQ(p["blk.0.attn_q_a.weight"], GgmlType::Q4_K);
  EXPECT_EQ(p["blk.0.attn_kv_a_mqa.weight"], GgmlType::Q4_K);
  // attn_k_b rows are 32 long: Q4_K does not fit; llama-quantize falls back to Q5_0.
  EXPECT_EQ(p["blk.1.attn_k_b.weight"], GgmlType::Q5_0);
  // attn_v_b is no role of llama-quantize's: the default.
  EXPECT_EQ(p["blk.2.attn_v_b.weight"], GgmlType::Q4_K);
  EXPECT_EQ(p["blk.1.attn_output.weight"], GgmlType::Q5_K);  // 8 experts in Q4_K_M
  // ffn_down: use_more_bits(i, 3) holds for layer 2 only (n/8 = 0, 7n/8 = 2).
  EXPECT_EQ(p["blk.0.ffn_down.weight"], GgmlType::Q4_K);
  EXPECT_EQ(p["blk.1.ffn_down_exps.weight"], GgmlType::Q4_K);
  EXPECT_EQ(p["blk.1.ffn_down_shexp.weight"], GgmlType::Q4_K);
  EXPECT_EQ(p["blk.2.ffn_down_exps.weight"], GgmlType::Q6_K);
  EXPECT_EQ(p["blk.2.ffn_down_shexp.weight"], GgmlType::Q6_K);
  EXPECT_EQ(p["blk.2.ffn_gate_exps.weight"], GgmlType::Q4_K);
  // Kept as they are.
  EXPECT_EQ(p["blk.1.ffn_gate_inp.weight"], GgmlType::F32);
  EXPECT_EQ(p["blk.1.exp_probs_b.bias"], GgmlType::F32);
  EXPECT_EQ(p["blk.1.attn_kv_a_norm.weight"], GgmlType::F32);
  EXPECT_EQ(p["output_norm.weight"], GgmlType::F32);
}

TEST(QuantizePlan, MoreBitsLayersWithoutTheEightExpertRule) {
  Spec s;
  s.n_expert = 16;
  s.kv_b = true;
  auto p = plan_of(s, QuantFileType::Q4_K_M);
  // attention-V-like tensors counted in file order: i = 0, 1, 2 of n = 3 -> only i = 2 gets more bits.
  EXPECT_EQ(p["blk.0.attn_kv_b.weight"], GgmlType::Q4_K);
  EXPECT_EQ(p["blk.1.attn_kv_b.weight"], GgmlType::Q4_K);
  EXPECT_EQ(p["blk.2.attn_kv_b.weight"], GgmlType::Q6_K);
  EXPECT_EQ(p["blk.2.attn_v_b.weight"], GgmlType::Q4_K);  // not a role of llama-quantize's
  EXPECT_EQ(p["blk.1.attn_output.weight"], GgmlType::Q4_K);
  // 16 layers: more bits at 0, 1 (< 2), 14, 15 (>= 14) and where (i - 2) % 3 == 2: 4, 7, 10, 13.
  s.n_layer = 16;
  p = plan_of(s, QuantFileType::Q4_K_M);
  std::vector<int> more;
  for (int il = 1; il < 16; ++il)
    if (p["blk." + std::to_string(il) + ".ffn_down_exps.weight"] == GgmlType::Q6_K) more.push_back(il);
  EXPECT_EQ(more, (std::vector<int>{1, 4, 7, 10, 13, 14, 15}));
  EXPECT_EQ(p["blk.0.ffn_down.weight"], GgmlType::Q6_K);
}

TEST(QuantizePlan, Q8AndF16AndTiedOutput) {
  auto q8 = plan_of(Spec{}, QuantFileType::Q8_0);
  for (const auto& [name, t] : q8) {
    const bool kept = name.find("_norm.weight") != std::string::npos ||
                      name.find("ffn_gate_inp") != std::string::npos || name.find(".bias") != std::string::npos;
    EXPECT_EQ(t, kept ? GgmlType::F32 : GgmlType::Q8_0) << name;
  }
  Spec tied;
  tied.tied = true;
  auto p = plan_of(tied, QuantFileType::Q4_K_M);
  EXPECT_EQ(p["token_embd.weight"], GgmlType::Q6_K);  // plays the output's role
  Spec f32;
  f32.weight_type = GgmlType::F32;
  auto f16 = plan_of(f32, QuantFileType::F16);
  EXPECT_EQ(f16["blk.1.ffn_up_exps.weight"], GgmlType::F16);
  EXPECT_EQ(f16["blk.1.attn_k_b.weight"], GgmlType::F16);
  EXPECT_EQ(f16["output_norm.weight"], GgmlType::F32);
}

TEST(QuantizePlan, RejectsQuantizedInputAndParsesNames) {
  Spec s;
  s.weight_type = GgmlType::Q8_0;
  EXPECT_THROW(plan_of(s, QuantFileType::Q4_K_M), Error);
  EXPECT_EQ(parse_quant_file_type("Q4_K"), QuantFileType::Q4_K_M);
  EXPECT_EQ(parse_quant_file_type("q5_k_m"), QuantFileType::Q5_K_M);
  EXPECT_EQ(parse_quant_file_type("q3_k"), QuantFileType::Q3_K_M);
  EXPECT_EQ(parse_quant_file_type("IQ2_xxs"), QuantFileType::IQ2_XXS);
  EXPECT_EQ(parse_quant_file_type("mxfp4_moe"), QuantFileType::MXFP4_MOE);
  EXPECT_FALSE(parse_quant_file_type("q3_k_xl").has_value());
  EXPECT_FALSE(parse_quant_file_type("q4_1").has_value());  // mla.cpp has no Q4_1 quantizer
  EXPECT_EQ(quant_file_type_id(QuantFileType::IQ2_M), 29u);
  EXPECT_EQ(quant_file_type_base(QuantFileType::IQ2_S), GgmlType::IQ2_XS);  // as llama-quantize
  EXPECT_EQ(quant_file_type_id(QuantFileType::Q4_K_M), 15u);
  EXPECT_EQ(quant_file_type_id(QuantFileType::Q8_0), 7u);
}

// IQ2_XXS with 8 experts (llama_tensor_get_type's low-bit i-quant branch).
TEST(QuantizePlan, Iq2XxsRolesAndFallback) {
  auto p = plan_of(Spec{}, QuantFileType::IQ2_XXS);
  EXPECT_EQ(p["output.weight"], GgmlType::Q5_K);
  EXPECT_EQ(p["token_embd.weight"], GgmlType::Q2_K);
  EXPECT_EQ(p["blk.1.attn_output.weight"], GgmlType::Q5_K);  // 8 experts
  EXPECT_EQ(p["blk.1.ffn_up_exps.weight"], GgmlType::IQ2_XXS);
  EXPECT_EQ(p["blk.1.ffn_down_exps.weight"], GgmlType::IQ2_XXS);  // i_ffn_down >= n_layer/8 = 0
  // Rows of 32: the 256-element i-quants fall back to IQ4_NL.
  EXPECT_EQ(p["blk.1.attn_k_b.weight"], GgmlType::IQ4_NL);
  Spec s;
  s.n_layer = 16;
  s.n_expert = 16;
  p = plan_of(s, QuantFileType::IQ2_M);
  // ffn_down tensors counted in file order: blk.0 ffn_down, blk.1 exps and shexp are below 16/8.
  EXPECT_EQ(p["blk.0.ffn_down.weight"], GgmlType::IQ3_S);
  EXPECT_EQ(p["blk.1.ffn_down_exps.weight"], GgmlType::IQ3_S);
  EXPECT_EQ(p["blk.1.ffn_down_shexp.weight"], GgmlType::IQ2_S);
  EXPECT_EQ(p["blk.1.attn_output.weight"], GgmlType::IQ3_S);
  EXPECT_EQ(p["blk.1.ffn_gate_exps.weight"], GgmlType::IQ2_S);
}

TEST(QuantizePlan, Q2KAndMxfp4Moe) {
  Spec s;
  s.n_expert = 16;
  auto p = plan_of(s, QuantFileType::Q2_K);
  EXPECT_EQ(p["blk.1.ffn_down_exps.weight"], GgmlType::Q3_K);
  EXPECT_EQ(p["blk.1.attn_output.weight"], GgmlType::Q3_K);
  EXPECT_EQ(p["blk.1.ffn_gate_exps.weight"], GgmlType::Q2_K);
  EXPECT_EQ(p["blk.1.attn_k_b.weight"], GgmlType::Q4_0);  // rows of 32
  p = plan_of(s, QuantFileType::MXFP4_MOE);
  EXPECT_EQ(p["blk.1.ffn_gate_exps.weight"], GgmlType::MXFP4);
  EXPECT_EQ(p["blk.1.ffn_down_shexp.weight"], GgmlType::Q8_0);
  EXPECT_EQ(p["blk.1.attn_k_b.weight"], GgmlType::MXFP4);  // 3-D: llama-quantize takes it for experts too
  EXPECT_EQ(p["output.weight"], GgmlType::Q8_0);
}

// A UD-Q2_K_XL-shaped file in one command: overrides first (first match wins), then the rules.
TEST(QuantizePlan, TensorTypeOverrides) {
  auto p = plan_of(
      Spec{}, QuantFileType::Q4_K_M,
      {"ffn_down_exps=iq3_xxs", "ffn_(gate|up)_exps=iq2_xxs", "ffn_down=q6_k", "shexp=q5_k", "attn_(k|v)_b=q8_0"});
  EXPECT_EQ(p["blk.1.ffn_gate_exps.weight"], GgmlType::IQ2_XXS);
  EXPECT_EQ(p["blk.2.ffn_up_exps.weight"], GgmlType::IQ2_XXS);
  EXPECT_EQ(p["blk.1.ffn_down_exps.weight"], GgmlType::IQ3_XXS);  // the first pattern, not ffn_down
  EXPECT_EQ(p["blk.1.ffn_down_shexp.weight"], GgmlType::Q6_K);    // ffn_down comes before shexp
  EXPECT_EQ(p["blk.1.ffn_up_shexp.weight"], GgmlType::Q5_K);
  EXPECT_EQ(p["blk.0.ffn_down.weight"], GgmlType::Q6_K);
  EXPECT_EQ(p["blk.1.attn_k_b.weight"], GgmlType::Q8_0);
  EXPECT_EQ(p["blk.1.attn_v_b.weight"], GgmlType::Q8_0);
  EXPECT_EQ(p["blk.1.attn_q_b.weight"], GgmlType::Q4_K);  // no pattern: the file type's rules
  EXPECT_EQ(p["output.weight"], GgmlType::Q6_K);
  // An override whose block does not divide the row falls back like the rules do.
  p = plan_of(Spec{}, QuantFileType::Q4_K_M, {"attn_k_b=iq2_xxs"});
  EXPECT_EQ(p["blk.1.attn_k_b.weight"], GgmlType::IQ4_NL);
}

TEST(QuantizePlan, BadOverridesNameTheProblem) {
  auto message = [](const std::string& spec) {
    try {
      parse_tensor_type_override(spec);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("ffn_down").find("expected PATTERN=TYPE"), std::string::npos);
  EXPECT_NE(message("=q8_0").find("pattern before '=' is empty"), std::string::npos);
  EXPECT_NE(message("ffn=q9_9").find("unknown tensor type 'q9_9'"), std::string::npos);
  EXPECT_NE(message("ffn=q4_1").find("cannot write Q4_1"), std::string::npos);
  EXPECT_NE(message("ffn_(down=q8_0").find("bad regular expression 'ffn_(down'"), std::string::npos);
  EXPECT_EQ(parse_tensor_type_override("a=b=IQ2_XXS").pattern, "a=b");  // the last '=' splits
}

}  // namespace
}  // namespace mla
