#include "util/ggml_type.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>

namespace mla {
namespace {

struct Entry {
  GgmlType type;
  GgmlTypeTraits traits;
};

// Block sizes follow ggml's block structs (QK_K = 256 super-blocks).
constexpr std::array kTypes = {
    Entry{GgmlType::F32, {"F32", 1, 4}},
    Entry{GgmlType::F16, {"F16", 1, 2}},
    Entry{GgmlType::Q4_0, {"Q4_0", 32, 18}},
    Entry{GgmlType::Q4_1, {"Q4_1", 32, 20}},
    Entry{GgmlType::Q5_0, {"Q5_0", 32, 22}},
    Entry{GgmlType::Q5_1, {"Q5_1", 32, 24}},
    Entry{GgmlType::Q8_0, {"Q8_0", 32, 34}},
    Entry{GgmlType::Q8_1, {"Q8_1", 32, 36}},
    Entry{GgmlType::Q2_K, {"Q2_K", 256, 84}},
    Entry{GgmlType::Q3_K, {"Q3_K", 256, 110}},
    Entry{GgmlType::Q4_K, {"Q4_K", 256, 144}},
    Entry{GgmlType::Q5_K, {"Q5_K", 256, 176}},
    Entry{GgmlType::Q6_K, {"Q6_K", 256, 210}},
    Entry{GgmlType::Q8_K, {"Q8_K", 256, 292}},
    Entry{GgmlType::IQ2_XXS, {"IQ2_XXS", 256, 66}},
    Entry{GgmlType::IQ2_XS, {"IQ2_XS", 256, 74}},
    Entry{GgmlType::IQ3_XXS, {"IQ3_XXS", 256, 98}},
    Entry{GgmlType::IQ1_S, {"IQ1_S", 256, 50}},
    Entry{GgmlType::IQ4_NL, {"IQ4_NL", 32, 18}},
    Entry{GgmlType::IQ3_S, {"IQ3_S", 256, 110}},
    Entry{GgmlType::IQ2_S, {"IQ2_S", 256, 82}},
    Entry{GgmlType::IQ4_XS, {"IQ4_XS", 256, 136}},
    Entry{GgmlType::I8, {"I8", 1, 1}},
    Entry{GgmlType::I16, {"I16", 1, 2}},
    Entry{GgmlType::I32, {"I32", 1, 4}},
    Entry{GgmlType::I64, {"I64", 1, 8}},
    Entry{GgmlType::F64, {"F64", 1, 8}},
    Entry{GgmlType::IQ1_M, {"IQ1_M", 256, 56}},
    Entry{GgmlType::BF16, {"BF16", 1, 2}},
    Entry{GgmlType::TQ1_0, {"TQ1_0", 256, 54}},
    Entry{GgmlType::TQ2_0, {"TQ2_0", 256, 66}},
    Entry{GgmlType::MXFP4, {"MXFP4", 32, 17}},
    Entry{GgmlType::NVFP4, {"NVFP4", 64, 36}},
    Entry{GgmlType::Q1_0, {"Q1_0", 128, 18}},
    Entry{GgmlType::Q2_0, {"Q2_0", 64, 18}},
    // ik_llama.cpp's types (block structs in its ggml-common.h, row headers in its ggml.c traits).
    Entry{GgmlType::Q6_0, {"Q6_0", 32, 26}},
    Entry{GgmlType::IQ2_K, {"IQ2_K", 256, 76}},
    Entry{GgmlType::IQ3_K, {"IQ3_K", 256, 110}},
    Entry{GgmlType::IQ4_K, {"IQ4_K", 256, 144}},
    Entry{GgmlType::IQ5_K, {"IQ5_K", 256, 176}},
    Entry{GgmlType::IQ6_K, {"IQ6_K", 256, 212}},
    Entry{GgmlType::IQ4_KS, {"IQ4_KS", 256, 136, 4}},
    Entry{GgmlType::IQ2_KS, {"IQ2_KS", 256, 70, 2}},
    Entry{GgmlType::IQ4_KSS, {"IQ4_KSS", 256, 128, 4}},
    Entry{GgmlType::IQ5_KS, {"IQ5_KS", 256, 168, 4}},
    Entry{GgmlType::IQ2_KT, {"IQ2_KT", 256, 68, 4}},
    Entry{GgmlType::IQ3_KT, {"IQ3_KT", 256, 100, 4}},
    Entry{GgmlType::IQ4_KT, {"IQ4_KT", 256, 128, 4}},
    Entry{GgmlType::IQ3_KS, {"IQ3_KS", 256, 102, 2}},
    Entry{GgmlType::IQ2_KL, {"IQ2_KL", 256, 86, 2}},
    Entry{GgmlType::IQ1_KT, {"IQ1_KT", 256, 56, 4}},
};

constexpr std::array<GgmlType, kTypes.size()> make_all() {
  std::array<GgmlType, kTypes.size()> out{};
  for (size_t i = 0; i < kTypes.size(); ++i) out[i] = kTypes[i].type;
  return out;
}
constexpr auto kAll = make_all();

}  // namespace

std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t id) {
  for (const auto& e : kTypes)
    if (static_cast<uint32_t>(e.type) == id) return e.traits;
  return std::nullopt;
}

const GgmlTypeTraits& ggml_traits(GgmlType t) {
  for (const auto& e : kTypes)
    if (e.type == t) return e.traits;
  static const GgmlTypeTraits unknown{"UNKNOWN", 1, 0};
  return unknown;
}

std::string_view ggml_type_name(GgmlType t) { return ggml_traits(t).name; }

std::optional<GgmlType> ggml_type_from_name(std::string_view name) {
  std::string up(name);
  std::transform(up.begin(), up.end(), up.begin(), [](unsigned char c) { return std::toupper(c); });
  for (const auto& e : kTypes)
    if (e.traits.name == up) return e.type;
  return std::nullopt;
}

const GgmlType* ggml_all_types(int* count) {
  *count = static_cast<int>(kAll.size());
  return kAll.data();
}

}  // namespace mla
