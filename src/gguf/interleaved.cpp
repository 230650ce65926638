// The ik_llama.cpp row-interleaved forms mla.cpp converts (interleaved.h), by ik id, with the
// converter of each; the converters are in interleaved_{legacy,kquants,iquants,iqk}.cpp.
#include "gguf/interleaved.h"

#include <array>

#include "gguf/interleaved_families.h"
#include "util/error.h"

namespace mla {
namespace {

namespace il = interleaved;

// Ids and names: ik_llama.cpp's ggml.h. Not converted, for want of a base type mla.cpp loads or
// because their values are not a base type's: IQ1_M_R4 (per-row fp16 scale and 4-bit block
// scales d * s, where IQ1_M's are d * (2s + 1)), IQ2_BN_R4 (IQ2_BN), Q8_KV_R8 (Q8_KV: an fp32 row
// scale, not exact as Q8_0's fp16).
constexpr std::array kForms = {
    IkInterleavedForm{202, "Q4_0_R8", GgmlType::Q4_0, 8, il::q4_0_r8},
    IkInterleavedForm{206, "Q5_0_R4", GgmlType::Q5_0, 4, il::q5_0_r4},
    IkInterleavedForm{208, "Q8_0_R8", GgmlType::Q8_0, 8, il::q8_0_r8},
    IkInterleavedForm{210, "Q2_K_R4", GgmlType::Q2_K, 4, il::q2_k_r4},
    IkInterleavedForm{211, "Q3_K_R4", GgmlType::Q3_K, 4, il::q3_k_r4},
    IkInterleavedForm{212, "Q4_K_R4", GgmlType::Q4_K, 4, il::q4_k_r4},
    IkInterleavedForm{213, "Q5_K_R4", GgmlType::Q5_K, 4, il::q5_k_r4},
    IkInterleavedForm{214, "Q6_K_R4", GgmlType::Q6_K, 4, il::q6_k_r4},
    IkInterleavedForm{216, "IQ2_XXS_R4", GgmlType::IQ2_XXS, 4, il::iq2_xxs_r4},
    IkInterleavedForm{217, "IQ2_XS_R4", GgmlType::IQ2_XS, 4, il::iq2_xs_r4},
    IkInterleavedForm{218, "IQ3_XXS_R4", GgmlType::IQ3_XXS, 4, il::iq3_xxs_r4},
    IkInterleavedForm{219, "IQ1_S_R4", GgmlType::IQ1_S, 4, il::iq1_s_r4, 32, 6, 2},
    IkInterleavedForm{220, "IQ4_NL_R4", GgmlType::IQ4_NL, 4, il::iq4_nl_r4},
    IkInterleavedForm{221, "IQ3_S_R4", GgmlType::IQ3_S, 4, il::iq3_s_r4},
    IkInterleavedForm{222, "IQ2_S_R4", GgmlType::IQ2_S, 4, il::iq2_s_r4},
    IkInterleavedForm{223, "IQ4_XS_R8", GgmlType::IQ4_XS, 8, il::iq4_xs_r8},
    // 16 rows of BF16 interleaved in pairs of columns: rows of an even length.
    IkInterleavedForm{230, "BF16_R16", GgmlType::BF16, 16, il::bf16_r16, 2, 4, 0},
    IkInterleavedForm{233, "Q6_0_R4", GgmlType::Q6_0, 4, il::q6_0_r4},
    IkInterleavedForm{337, "IQ2_K_R4", GgmlType::IQ2_K, 4, il::iq2_k_r4},
    IkInterleavedForm{338, "IQ3_K_R4", GgmlType::IQ3_K, 4, il::iq3_k_r4},
    IkInterleavedForm{339, "IQ4_K_R4", GgmlType::IQ4_K, 4, il::iq4_k_r4},
    IkInterleavedForm{340, "IQ5_K_R4", GgmlType::IQ5_K, 4, il::iq5_k_r4},
    IkInterleavedForm{344, "IQ4_KS_R4", GgmlType::IQ4_KS, 4, il::iq4_ks_r4},
    IkInterleavedForm{352, "IQ5_KS_R4", GgmlType::IQ5_KS, 4, il::iq5_ks_r4},
    IkInterleavedForm{353, "MXFP4_R8", GgmlType::MXFP4, 8, il::mxfp4_r8},
    // Q8_K rows with an fp16 scale per 256 elements (2 + 256 bytes), read as Q8_0.
    IkInterleavedForm{397, "Q8_K_R16", GgmlType::Q8_0, 16, il::q8_k_r16, 256, 258, 0},
    IkInterleavedForm{399, "Q8_K_R8", GgmlType::Q8_0, 8, il::q8_k_r8, 256, 258, 0},
};

}  // namespace

const IkInterleavedForm* ik_interleaved_form(uint32_t ik_id) {
  for (const auto& f : kForms)
    if (f.ik_id == ik_id) return &f;
  return nullptr;
}

std::span<const IkInterleavedForm> ik_interleaved_forms() { return kForms; }

void deinterleave_rows(const IkInterleavedForm& f, const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst) {
  const int64_t block = f.row_block_elems();
  if (n_rows % f.n_interleaved != 0 || n_cols % block != 0)
    fail("{}: {} rows of {} elements do not make whole groups of {} rows of {}-element blocks", f.name, n_rows, n_cols,
         f.n_interleaved, block);
  f.convert(src, n_rows, n_cols, dst);
}

}  // namespace mla
