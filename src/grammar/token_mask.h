#pragma once
// Token bitmasks of constrained decoding. Layout (xgrammar's): 32-bit words, bit (id % 32) of
// word (id / 32) is 1 when token id is allowed; token_mask_words(n_vocab) words per sequence.
#include <cstdint>
#include <span>

namespace mla {

constexpr int token_mask_words(int n_vocab) { return (n_vocab + 31) / 32; }

inline bool token_allowed(std::span<const uint32_t> mask, int32_t id) {
  return (mask[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1u;
}

// Sets logits[id] to -inf for every id < logits.size() whose bit is 0; bits past the end are
// ignored. mask.size() >= token_mask_words(logits.size()). Skips all-ones words (the common
// case away from the grammar's narrow points), so an unconstrained stretch costs n_vocab / 32
// word tests.
void apply_token_mask(std::span<float> logits, std::span<const uint32_t> mask);
// One token at a time: the reference the test compares apply_token_mask with.
void apply_token_mask_ref(std::span<float> logits, std::span<const uint32_t> mask);

// Number of allowed ids below n_vocab.
int count_allowed_tokens(std::span<const uint32_t> mask, int n_vocab);

}  // namespace mla
