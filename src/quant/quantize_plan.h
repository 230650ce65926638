#pragma once
// Which type each tensor of a GGUF gets when the file is quantized to a "file type" — the rules of
// llama.cpp's llama-quantize (llama_tensor_get_type, without an importance matrix) for the file
// types mla.cpp can write, so a file made by `mla gguf quantize IN OUT Q4_K_M` has the tensor
// types llama.cpp users expect:
//   - only tensors with >= 2 dimensions whose name ends in "weight" are quantized; norms
//     ("*_norm.weight"), the router (ffn_gate_inp) and 1-D tensors keep their type;
//   - output.weight (and token_embd.weight when the output is tied to it) gets Q6_K (Q5_K in the
//     IQ1/IQ2/IQ3_XXS files, Q8_0 in Q8_0 and MXFP4_MOE files, or when its rows do not fit the
//     file type's blocks);
//   - per role — attention-V-like (attn_v, attn_qkv, attn_kv_b), attn_k, attn_q, attn_output,
//     ffn_down (counted by layer), ffn_gate/ffn_up, token_embd — each file type raises or lowers
//     the bits as llama-quantize does, using the model's expert count (8 experts: the Mixtral
//     rules), its GQA ratio (head_count / head_count_kv, 4 or more counts as grouped) and the
//     "more bits" layers (the first and last eighth, and every third in between);
//   - MXFP4_MOE: expert tensors (3-D) MXFP4, everything else Q8_0;
//   - a --tensor-type override (a regular expression searched in the name, first match wins)
//     replaces the role rules for the tensors it matches;
//   - a row length the chosen block does not divide falls back: 256-element i-quants to IQ4_NL,
//     Q2_K/Q3_K to Q4_0, Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0; ik_llama.cpp's types as its
//     llama-quantize does (IQ2_K..IQ4_KSS to IQ4_NL, IQ4_K and IQ5_KS to Q5_0, IQ5_K to Q6_0, IQ6_K
//     to Q8_0); then F16 when even that does not fit.
// Not modelled: importance-matrix rules (mla.cpp has none), Falcon's and 70B llama's rules, and
// llama-quantize's --output-tensor-type / --token-embedding-type / --pure. One deliberate
// difference: --tensor-type also applies in F16 files (llama-quantize ignores it there).
#include <cstdint>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "util/ggml_type.h"

namespace mla {

class GgufFile;
struct GgufTensorInfo;

enum class QuantFileType : uint8_t {
  F16,
  Q8_0,
  Q4_0,
  Q5_0,
  Q2_K,
  Q3_K_S,
  Q3_K_M,
  Q3_K_L,
  Q4_K_S,
  Q4_K_M,
  Q5_K_S,
  Q5_K_M,
  Q6_K,
  IQ4_NL,
  IQ4_XS,
  MXFP4_MOE,
  IQ1_S,
  IQ1_M,
  IQ2_XXS,
  IQ2_XS,
  IQ2_S,
  IQ2_M,
  IQ3_XXS,
  IQ3_XS,
  IQ3_S,
  IQ3_M,
};

// llama-quantize's names, case-insensitive, with its aliases q3_k (= Q3_K_M), q4_k (= Q4_K_M)
// and q5_k (= Q5_K_M).
std::optional<QuantFileType> parse_quant_file_type(std::string_view name);
std::string_view quant_file_type_name(QuantFileType t);  // "Q4_K_M", ...
// Every name parse_quant_file_type accepts, lower case, comma-separated (for messages and help).
std::string quant_file_type_list();
// llama.cpp's llama_ftype value, written as general.file_type.
uint32_t quant_file_type_id(QuantFileType t);
// The type most tensors get.
GgmlType quant_file_type_base(QuantFileType t);

// One --tensor-type PATTERN=TYPE: tensors whose name contains a match of the ECMAScript regular
// expression PATTERN get TYPE (a ggml type name such as q8_0 or iq2_xxs).
struct TensorTypeOverride {
  std::string pattern;
  std::regex re;
  GgmlType type;
};
// Throws mla::Error naming what is wrong: no '=', an empty pattern, a bad regular expression, an
// unknown type, or a type mla.cpp cannot write.
TensorTypeOverride parse_tensor_type_override(std::string_view spec);

struct TensorQuantPlan {
  std::string name;
  GgmlType from;
  GgmlType to;
  std::string reason;  // why `to` (one short phrase)
};

// One entry per tensor of f, in file order. Throws mla::Error when a tensor that would be
// quantized is not F32/F16/BF16 (re-quantizing an already quantized tensor loses accuracy twice).
std::vector<TensorQuantPlan> plan_quantization(const GgufFile& f, QuantFileType t,
                                               const std::vector<TensorTypeOverride>& overrides = {});

}  // namespace mla
