#pragma once
// `--speculative-config JSON` (mla serve, run and bench), spelled as vLLM spells it:
//   {"method": "mtp", "num_speculative_tokens": K}
// The model's own MTP (nextn) layer drafts K tokens per step (1 <= K <= 4).
#include <cstdint>
#include <string_view>

namespace mla {

inline constexpr int kMaxSpeculativeTokens = 4;

// K from the JSON text; 0 for an empty text (speculation off). Throws mla::Error with a one-line
// message naming what is wrong: malformed JSON, not an object, an unknown key, a method other than
// "mtp", or num_speculative_tokens missing, not an integer or outside 1..4.
int parse_speculative_config(std::string_view text);

// How well the drafts did over some verify steps (what `mla run` and `mla bench` print): rate =
// accepted / draft tokens; mean accepted length = tokens per verify step, the accepted drafts plus
// the target's own token. Each 0 where there was nothing to divide by.
struct SpecAcceptance {
  double rate = 0;
  double mean_len = 0;
};
SpecAcceptance spec_acceptance(int64_t n_drafts, int64_t n_draft_tokens, int64_t n_accepted_tokens);

}  // namespace mla
