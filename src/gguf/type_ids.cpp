#include "gguf/type_ids.h"

#include <fmt/format.h>

#include <array>

namespace mla {
namespace {

using T = GgmlType;
constexpr std::nullopt_t kNone = std::nullopt;

// Mainline: ggml-org/llama.cpp ggml/include/ggml.h (NVFP4 = 40, Q1_0 = 41, Q2_0 = 42 are its ids
// after MXFP4). ik: ik_llama.cpp ggml/include/ggml.h. Ids 0-30 and 39 are common to both; ids
// retired by an engine (4, 5; mainline's 31-33 and 36-38) are absent from its column.
constexpr std::array kTable = {
    TypeIdEntry{0, "F32", "F32", true, T::F32},
    TypeIdEntry{1, "F16", "F16", true, T::F16},
    TypeIdEntry{2, "Q4_0", "Q4_0", true, T::Q4_0},
    TypeIdEntry{3, "Q4_1", "Q4_1", true, T::Q4_1},
    TypeIdEntry{6, "Q5_0", "Q5_0", true, T::Q5_0},
    TypeIdEntry{7, "Q5_1", "Q5_1", true, T::Q5_1},
    TypeIdEntry{8, "Q8_0", "Q8_0", true, T::Q8_0},
    TypeIdEntry{9, "Q8_1", "Q8_1", true, T::Q8_1},
    TypeIdEntry{10, "Q2_K", "Q2_K", true, T::Q2_K},
    TypeIdEntry{11, "Q3_K", "Q3_K", true, T::Q3_K},
    TypeIdEntry{12, "Q4_K", "Q4_K", true, T::Q4_K},
    TypeIdEntry{13, "Q5_K", "Q5_K", true, T::Q5_K},
    TypeIdEntry{14, "Q6_K", "Q6_K", true, T::Q6_K},
    TypeIdEntry{15, "Q8_K", "Q8_K", true, T::Q8_K},
    TypeIdEntry{16, "IQ2_XXS", "IQ2_XXS", true, T::IQ2_XXS},
    TypeIdEntry{17, "IQ2_XS", "IQ2_XS", true, T::IQ2_XS},
    TypeIdEntry{18, "IQ3_XXS", "IQ3_XXS", true, T::IQ3_XXS},
    TypeIdEntry{19, "IQ1_S", "IQ1_S", true, T::IQ1_S},
    TypeIdEntry{20, "IQ4_NL", "IQ4_NL", true, T::IQ4_NL},
    TypeIdEntry{21, "IQ3_S", "IQ3_S", true, T::IQ3_S},
    TypeIdEntry{22, "IQ2_S", "IQ2_S", true, T::IQ2_S},
    TypeIdEntry{23, "IQ4_XS", "IQ4_XS", true, T::IQ4_XS},
    TypeIdEntry{24, "I8", "I8", true, T::I8},
    TypeIdEntry{25, "I16", "I16", true, T::I16},
    TypeIdEntry{26, "I32", "I32", true, T::I32},
    TypeIdEntry{27, "I64", "I64", true, T::I64},
    TypeIdEntry{28, "F64", "F64", true, T::F64},
    TypeIdEntry{29, "IQ1_M", "IQ1_M", true, T::IQ1_M},
    TypeIdEntry{30, "BF16", "BF16", true, T::BF16},
    TypeIdEntry{31, "", "Q4_0_4_4", false, kNone},
    TypeIdEntry{32, "", "Q4_0_4_8", false, kNone},
    TypeIdEntry{33, "", "Q4_0_8_8", false, kNone},
    TypeIdEntry{34, "TQ1_0", "", false, T::TQ1_0},
    TypeIdEntry{35, "TQ2_0", "", false, T::TQ2_0},
    TypeIdEntry{36, "", "I2_S", false, kNone},
    TypeIdEntry{39, "MXFP4", "MXFP4", true, T::MXFP4},
    TypeIdEntry{40, "NVFP4", "", false, T::NVFP4},
    // The same Bonsai format under two names: fp16 scale + 128 sign bits.
    TypeIdEntry{41, "Q1_0", "Q1_0_G128", true, T::Q1_0},
    TypeIdEntry{42, "Q2_0", "", false, T::Q2_0},
    TypeIdEntry{97, "", "Q8_0_X4", false, kNone},
    TypeIdEntry{98, "", "Q8_1_X4", false, kNone},
    TypeIdEntry{99, "", "Q8_2_X4", false, kNone},
    TypeIdEntry{133, "", "Q6_0", false, T::Q6_0},
    TypeIdEntry{134, "", "IQ1_BN", false, kNone},
    TypeIdEntry{135, "", "IQ2_BN", false, kNone},
    TypeIdEntry{136, "", "Q8_K64", false, kNone},
    TypeIdEntry{137, "", "IQ2_K", false, T::IQ2_K},
    TypeIdEntry{138, "", "IQ3_K", false, T::IQ3_K},
    TypeIdEntry{139, "", "IQ4_K", false, T::IQ4_K},
    TypeIdEntry{140, "", "IQ5_K", false, T::IQ5_K},
    TypeIdEntry{141, "", "IQ6_K", false, T::IQ6_K},
    TypeIdEntry{144, "", "IQ4_KS", false, T::IQ4_KS},
    TypeIdEntry{145, "", "IQ2_KS", false, T::IQ2_KS},
    TypeIdEntry{146, "", "IQ4_KSS", false, T::IQ4_KSS},
    TypeIdEntry{147, "", "Q8_K16", false, kNone},
    TypeIdEntry{148, "", "Q8_K32", false, kNone},
    TypeIdEntry{149, "", "Q8_KR8", false, kNone},
    TypeIdEntry{150, "", "Q8_K128", false, kNone},
    TypeIdEntry{151, "", "Q8_KV", false, kNone},
    TypeIdEntry{152, "", "IQ5_KS", false, T::IQ5_KS},
    TypeIdEntry{153, "", "IQ2_KT", false, T::IQ2_KT},
    TypeIdEntry{154, "", "IQ3_KT", false, T::IQ3_KT},
    TypeIdEntry{155, "", "IQ4_KT", false, T::IQ4_KT},
    TypeIdEntry{156, "", "IQ3_KS", false, T::IQ3_KS},
    TypeIdEntry{157, "", "IQ2_KL", false, T::IQ2_KL},
    TypeIdEntry{158, "", "IQ1_KT", false, T::IQ1_KT},
    TypeIdEntry{202, "", "Q4_0_R8", false, kNone},
    TypeIdEntry{206, "", "Q5_0_R4", false, kNone},
    TypeIdEntry{208, "", "Q8_0_R8", false, kNone},
    TypeIdEntry{210, "", "Q2_K_R4", false, kNone},
    TypeIdEntry{211, "", "Q3_K_R4", false, kNone},
    TypeIdEntry{212, "", "Q4_K_R4", false, kNone},
    TypeIdEntry{213, "", "Q5_K_R4", false, kNone},
    TypeIdEntry{214, "", "Q6_K_R4", false, kNone},
    TypeIdEntry{216, "", "IQ2_XXS_R4", false, kNone},
    TypeIdEntry{217, "", "IQ2_XS_R4", false, kNone},
    TypeIdEntry{218, "", "IQ3_XXS_R4", false, kNone},
    TypeIdEntry{219, "", "IQ1_S_R4", false, kNone},
    TypeIdEntry{220, "", "IQ4_NL_R4", false, kNone},
    TypeIdEntry{221, "", "IQ3_S_R4", false, kNone},
    TypeIdEntry{222, "", "IQ2_S_R4", false, kNone},
    TypeIdEntry{223, "", "IQ4_XS_R8", false, kNone},
    TypeIdEntry{229, "", "IQ1_M_R4", false, kNone},
    TypeIdEntry{230, "", "BF16_R16", false, kNone},
    TypeIdEntry{233, "", "Q6_0_R4", false, kNone},
    TypeIdEntry{335, "", "IQ2_BN_R4", false, kNone},
    TypeIdEntry{337, "", "IQ2_K_R4", false, kNone},
    TypeIdEntry{338, "", "IQ3_K_R4", false, kNone},
    TypeIdEntry{339, "", "IQ4_K_R4", false, kNone},
    TypeIdEntry{340, "", "IQ5_K_R4", false, kNone},
    TypeIdEntry{344, "", "IQ4_KS_R4", false, kNone},
    TypeIdEntry{352, "", "IQ5_KS_R4", false, kNone},
    TypeIdEntry{353, "", "MXFP4_R8", false, kNone},
    TypeIdEntry{397, "", "Q8_K_R16", false, kNone},
    TypeIdEntry{398, "", "Q8_KV_R8", false, kNone},
    TypeIdEntry{399, "", "Q8_K_R8", false, kNone},
};

const TypeIdEntry* find_entry(std::span<const TypeIdEntry> table, uint32_t id) {
  for (const auto& e : table)
    if (e.id == id) return &e;
  return nullptr;
}

bool ambiguous(const TypeIdEntry& e) { return !e.mainline.empty() && !e.ik.empty() && !e.same_format; }

// The type a name denotes when mla.cpp knows its layout (ambiguous ids: each engine's own name).
std::optional<GgmlType> reading(const TypeIdEntry& e, TypeIdSpace s) {
  if (!ambiguous(e)) return e.type;
  return ggml_type_from_name(s == TypeIdSpace::Mainline ? e.mainline : e.ik);
}

// Whether the tensor's bytes under type t fit before the next tensor.
bool fits(const TypeIdTensor& t, std::optional<GgmlType> type) {
  if (!type) return false;
  const auto& tr = ggml_traits(*type);
  if (tr.block_bytes == 0 || t.row_length % tr.block_elems != 0) return false;
  const int64_t n_rows = t.row_length == 0 ? 0 : t.n_elements / t.row_length;
  const auto bytes = static_cast<uint64_t>(n_rows) * static_cast<uint64_t>(ggml_row_bytes(*type, t.row_length));
  return bytes <= t.room;
}

}  // namespace

std::string_view type_id_space_name(TypeIdSpace s) {
  switch (s) {
    case TypeIdSpace::Mainline:
      return "llama.cpp";
    case TypeIdSpace::Ik:
      return "ik_llama.cpp";
    case TypeIdSpace::Either:
      break;
  }
  return "either";
}

std::string type_id_label(std::string_view name, TypeIdSpace space, uint32_t id) {
  if (name.empty()) return fmt::format("unknown type id {} (neither llama.cpp nor ik_llama.cpp assigns it)", id);
  if (space == TypeIdSpace::Either) return fmt::format("{} (llama.cpp and ik_llama.cpp id {})", name, id);
  return fmt::format("{} ({} id {})", name, type_id_space_name(space), id);
}

std::span<const TypeIdEntry> type_id_table() { return kTable; }

TypeIdResolution resolve_type_ids(std::span<const TypeIdTensor> tensors, std::optional<int64_t> file_type,
                                  std::span<const TypeIdEntry> table) {
  // Evidence: ids only one engine assigns, and ik_llama.cpp's own file types (its LLAMA_FTYPE
  // values for its types start at 135; mainline's stay below 100).
  const TypeIdTensor* mainline_only = nullptr;
  const TypeIdTensor* ik_only = nullptr;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TypeIdTensor& t = tensors[i];
    const TypeIdEntry* e = find_entry(table, t.id);
    if (!e)
      throw TypeIdError(fmt::format("tensor '{}' has {}", t.name, type_id_label("", TypeIdSpace::Either, t.id)), i);
    if (e->ik.empty() && !mainline_only) mainline_only = &t;
    if (e->mainline.empty() && !ik_only) ik_only = &t;
  }
  const bool ik_file_type = file_type && *file_type >= 100;

  TypeIdResolution out;
  if (ik_only || ik_file_type) out.space = TypeIdSpace::Ik;
  if (mainline_only) out.space = out.space == TypeIdSpace::Ik ? TypeIdSpace::Either : TypeIdSpace::Mainline;
  const bool contradicting = mainline_only && (ik_only || ik_file_type);

  out.types.reserve(tensors.size());
  out.spaces.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TypeIdTensor& t = tensors[i];
    const TypeIdEntry& e = *find_entry(table, t.id);
    TypeIdSpace space = e.ik.empty()         ? TypeIdSpace::Mainline
                        : e.mainline.empty() ? TypeIdSpace::Ik
                                             : TypeIdSpace::Either;
    if (ambiguous(e)) {
      space = contradicting ? TypeIdSpace::Either : out.space;
      if (space == TypeIdSpace::Either) {
        const bool fits_mainline = fits(t, reading(e, TypeIdSpace::Mainline));
        const bool fits_ik = fits(t, reading(e, TypeIdSpace::Ik));
        if (fits_mainline != fits_ik) space = fits_mainline ? TypeIdSpace::Mainline : TypeIdSpace::Ik;
      }
      if (space == TypeIdSpace::Either) {
        std::string why = contradicting
                              ? fmt::format("tensor '{}' is llama.cpp-only and tensor '{}' ik_llama.cpp-only",
                                            mainline_only->name, ik_only ? ik_only->name : "general.file_type")
                              : "nothing in the file says which engine wrote it";
        throw TypeIdError(fmt::format("tensor '{}' has type id {}: {} or {}, and {} (nor does its size decide)", t.name,
                                      t.id, type_id_label(e.mainline, TypeIdSpace::Mainline, t.id),
                                      type_id_label(e.ik, TypeIdSpace::Ik, t.id), why),
                          i);
      }
    }
    std::optional<GgmlType> type = reading(e, space);
    const IkInterleavedForm* form = nullptr;
    if (!type && space == TypeIdSpace::Ik && (form = ik_interleaved_form(t.id))) type = form->base;
    if (!type) {
      const std::string what = type_id_label(space == TypeIdSpace::Ik ? e.ik : e.mainline, space, t.id);
      throw TypeIdError(fmt::format("tensor '{}' has type {}, which mla.cpp cannot read", t.name, what), i);
    }
    out.types.push_back(*type);
    out.spaces.push_back(space);
    out.interleaved.push_back(form);
  }
  return out;
}

}  // namespace mla
