// Token mask application: ours (word skipping) vs the per-token reference vs xgrammar's own
// ApplyTokenBitmaskInplaceCPU (the outside reference), on random masks and awkward vocab sizes.
#include <gtest/gtest.h>
#include <xgrammar/matcher.h>

#include <cmath>
#include <random>
#include <vector>

#include "grammar/token_mask.h"

namespace mla {
namespace {

// A 1-D CPU tensor over v (xgrammar reads strides[0], the row stride, even for one row).
struct Tensor1d {
  int64_t shape[1], strides[1];
  DLTensor t{};
  Tensor1d(void* data, int64_t n, DLDataType dtype) : shape{n}, strides{n} {
    t.data = data;
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 1;
    t.dtype = dtype;
    t.shape = shape;
    t.strides = strides;
  }
};

// xgrammar's in-place CPU masking of one logits row.
void apply_xgrammar(std::vector<float>& logits, std::vector<uint32_t>& mask) {
  Tensor1d lt(logits.data(), static_cast<int64_t>(logits.size()), DLDataType{kDLFloat, 32, 1});
  Tensor1d mt(mask.data(), static_cast<int64_t>(mask.size()), DLDataType{kDLInt, 32, 1});
  xgrammar::ApplyTokenBitmaskInplaceCPU(&lt.t, mt.t, static_cast<int>(logits.size()));
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  return true;
}

TEST(TokenMask, WordCount) {
  EXPECT_EQ(token_mask_words(1), 1);
  EXPECT_EQ(token_mask_words(32), 1);
  EXPECT_EQ(token_mask_words(33), 2);
  EXPECT_EQ(token_mask_words(129280), 4040);  // DeepSeek-V3's vocab
}

TEST(TokenMask, MatchesReferenceAndXgrammar) {
  std::mt19937 rng(11);
  for (int n_vocab : {1, 5, 31, 32, 33, 64, 1000, 4097, 32005}) {
    for (double p_allowed : {0.0, 0.02, 0.5, 0.98, 1.0}) {
      const int n_words = token_mask_words(n_vocab);
      std::vector<uint32_t> mask(n_words);
      std::bernoulli_distribution bit(p_allowed);
      for (int w = 0; w < n_words; ++w) {
        // Some words all-ones or all-zero, as in real grammar masks; bits past n_vocab random.
        const int kind = static_cast<int>(rng() % 4);
        uint32_t v = 0;
        for (int b = 0; b < 32; ++b) v |= static_cast<uint32_t>(bit(rng)) << b;
        mask[w] = kind == 0 ? 0xffffffffu : kind == 1 ? 0u : v;
      }
      std::normal_distribution<float> nd(0.0f, 3.0f);
      std::vector<float> logits(n_vocab);
      for (auto& x : logits) x = nd(rng);
      auto ours = logits, ref = logits, xg = logits;
      apply_token_mask(ours, mask);
      apply_token_mask_ref(ref, mask);
      apply_xgrammar(xg, mask);
      EXPECT_TRUE(same_bits(ours, ref)) << "n_vocab " << n_vocab << " p " << p_allowed;
      EXPECT_TRUE(same_bits(ours, xg)) << "n_vocab " << n_vocab << " p " << p_allowed;
      int n_kept = 0;
      for (int i = 0; i < n_vocab; ++i) {
        if (std::isfinite(ours[i])) {
          ++n_kept;
          EXPECT_EQ(ours[i], logits[i]);  // allowed logits are untouched
        }
      }
      EXPECT_EQ(n_kept, count_allowed_tokens(mask, n_vocab));
    }
  }
}

TEST(TokenMask, BitLayoutIsLowBitFirst) {
  // Token 0 is bit 0 of word 0, token 33 is bit 1 of word 1.
  std::vector<uint32_t> mask = {0x1u, 0x2u};
  std::vector<float> logits(40, 1.0f);
  apply_token_mask(logits, mask);
  for (int i = 0; i < 40; ++i) EXPECT_EQ(std::isfinite(logits[i]), i == 0 || i == 33) << i;
}

}  // namespace
}  // namespace mla
