#pragma once
// ggml tensor types as stored in GGUF files: ids, block geometry and names. The ids are the
// on-disk values llama.cpp and ik_llama.cpp write; gaps are ids retired upstream or never used
// (never valid in a file). Ids from 133 up are ik_llama.cpp's own types (its ggml.h); where the two
// engines' id spaces differ is in gguf/type_ids.h.
#include <cstdint>
#include <optional>
#include <string_view>

namespace mla {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
  // Added by mainline llama.cpp after MXFP4 (ik_llama.cpp's id 41, Q1_0_G128, is the same format).
  NVFP4 = 40,
  Q1_0 = 41,
  Q2_0 = 42,

  // ik_llama.cpp's own types (ids from its ggml.h). The trellis types (IQ*_KT) carry a 4-byte float
  // row scale before the row's blocks.
  Q6_0 = 133,
  IQ2_K = 137,
  IQ3_K = 138,
  IQ4_K = 139,
  IQ5_K = 140,
  IQ6_K = 141,
  IQ4_KS = 144,
  IQ2_KS = 145,
  IQ4_KSS = 146,
  IQ5_KS = 152,
  IQ2_KT = 153,
  IQ3_KT = 154,
  IQ4_KT = 155,
  IQ3_KS = 156,
  IQ2_KL = 157,
  IQ1_KT = 158,
};

struct GgmlTypeTraits {
  std::string_view name;  // as llama.cpp prints it: "Q4_K", "BF16", ...
  int64_t block_elems;    // elements per block (1 for plain types)
  int64_t block_bytes;    // bytes per block
  // Bytes at the start of every row before its first block (ik_llama.cpp's row scale: an fp32
  // for IQ4_KS / IQ4_KSS / IQ5_KS and the trellis types IQ1_KT..IQ4_KT, an fp16 for IQ2_KS /
  // IQ3_KS / IQ2_KL); 0 for every other type.
  int64_t row_meta_bytes = 0;
};

// nullopt for an id that is not a known type.
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t id);
// Precondition: t is a known type.
const GgmlTypeTraits& ggml_traits(GgmlType t);
std::string_view ggml_type_name(GgmlType t);
// Parses a name like "q4_k" or "Q4_K" (case-insensitive); nullopt if unknown.
std::optional<GgmlType> ggml_type_from_name(std::string_view name);
// Bytes of a row of n elements (row header included); precondition: n % block_elems == 0.
inline int64_t ggml_row_bytes(GgmlType t, int64_t n) {
  const auto& tr = ggml_traits(t);
  return tr.row_meta_bytes + n / tr.block_elems * tr.block_bytes;
}
// Every known type, in id order.
const GgmlType* ggml_all_types(int* count);

}  // namespace mla
