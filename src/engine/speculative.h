#pragma once
// `--speculative-config JSON` (mla serve, run and bench), spelled as vLLM spells it:
//   {"method": "mtp", "num_speculative_tokens": K}
// The model's own MTP (nextn) layer drafts K tokens per step (1 <= K <= 4).
#include <string_view>

namespace mla {

inline constexpr int kMaxSpeculativeTokens = 4;

// K from the JSON text; 0 for an empty text (speculation off). Throws mla::Error with a one-line
// message naming what is wrong: malformed JSON, not an object, an unknown key, a method other than
// "mtp", or num_speculative_tokens missing, not an integer or outside 1..4.
int parse_speculative_config(std::string_view text);

}  // namespace mla
