#pragma once
// Which type each tensor of a GGUF gets when the file is quantized to a "file type" — the rules of
// llama.cpp's llama-quantize (llama_tensor_get_type) for the types mla.cpp can write, so a file
// made by `mla gguf quantize IN OUT Q4_K_M` has the tensor types llama.cpp users expect:
//   - only tensors with >= 2 dimensions whose name ends in "weight" are quantized; norms
//     ("*_norm.weight"), the router (ffn_gate_inp) and 1-D tensors keep their type;
//   - output.weight (and token_embd.weight when the output is tied to it) gets Q6_K for every
//     K-quant file type (Q8_0 for Q8_0, or when its rows do not fit 256-element blocks);
//   - attention-V-like tensors (attn_v, attn_qkv, attn_kv_b and — an mla.cpp addition, because
//     for MLA it plays attn_kv_b's role — attn_v_b) get Q6_K in Q4_K_M/Q5_K_M on the "more bits"
//     layers (the first and last eighth and every third in between, counted over those tensors),
//     and Q8_0 in any file type when the model has exactly 8 experts (llama.cpp's Mixtral rule);
//   - attn_k gets Q8_0 with 8 experts; attn_output gets Q5_K in Q4_K_M with 8 experts;
//   - ffn_down* (dense, shared and routed) gets Q6_K in Q4_K_M/Q5_K_M on the "more bits" layers
//     (layer from the tensor name);
//   - a row length the chosen block does not divide falls back: Q4_K/Q5_K/Q6_K -> Q8_0 (llama.cpp
//     takes Q5_0/Q5_1 for Q4_K/Q5_K, which mla.cpp does not write; Q8_0 loses less), then F16.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/types.h"

namespace mla {

class GgufFile;
struct GgufTensorInfo;

enum class QuantFileType : uint8_t { F16, Q8_0, Q4_K_M, Q5_K_M, Q6_K };

// "f16", "q8_0", "q4_k_m" (also "q4_k"), "q5_k_m" (also "q5_k"), "q6_k"; case-insensitive.
std::optional<QuantFileType> parse_quant_file_type(std::string_view name);
std::string_view quant_file_type_name(QuantFileType t);  // "Q4_K_M", ...
// llama.cpp's llama_ftype value, written as general.file_type.
uint32_t quant_file_type_id(QuantFileType t);
// The type most tensors get.
GgmlType quant_file_type_base(QuantFileType t);

struct TensorQuantPlan {
  std::string name;
  GgmlType from;
  GgmlType to;
  std::string reason;  // why `to` (one short phrase)
};

// One entry per tensor of f, in file order. Throws mla::Error when a tensor that would be
// quantized is not F32/F16/BF16 (re-quantizing an already quantized tensor loses accuracy twice).
std::vector<TensorQuantPlan> plan_quantization(const GgufFile& f, QuantFileType t);

}  // namespace mla
