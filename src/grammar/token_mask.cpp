#include "grammar/token_mask.h"

#include <bit>
#include <cassert>
#include <limits>

namespace mla {
namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
}

void apply_token_mask(std::span<float> logits, std::span<const uint32_t> mask) {
  const size_t n = logits.size();
  assert(mask.size() >= static_cast<size_t>(token_mask_words(static_cast<int>(n))));
  const size_t n_words = (n + 31) / 32;
  for (size_t w = 0; w < n_words; ++w) {
    uint32_t banned = ~mask[w];
    if (banned == 0) continue;
    const size_t base = w * 32;
    while (banned) {
      const size_t id = base + static_cast<size_t>(std::countr_zero(banned));
      if (id >= n) break;  // ids rise within a word: the rest are past the end too
      logits[id] = kNegInf;
      banned &= banned - 1;
    }
  }
}

void apply_token_mask_ref(std::span<float> logits, std::span<const uint32_t> mask) {
  for (size_t id = 0; id < logits.size(); ++id)
    if (!token_allowed(mask, static_cast<int32_t>(id))) logits[id] = kNegInf;
}

int count_allowed_tokens(std::span<const uint32_t> mask, int n_vocab) {
  int n = 0;
  for (int32_t id = 0; id < n_vocab; ++id) n += token_allowed(mask, id);
  return n;
}

}  // namespace mla
