#pragma once
// Byte trie of special/added token texts, for leftmost-longest matching in raw text (the match
// rule of HF tokenizers' AddedVocabulary): scanning left to right, the first position where
// some token starts wins, and there the longest token.
#include <array>
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/bpe.h"

namespace mla::tok {

class TokenTrie {
 public:
  TokenTrie();
  // Empty texts are ignored; a repeated text keeps its first id.
  void insert(std::string_view text, TokenId id);
  bool empty() const { return n_tokens_ == 0; }
  size_t size() const { return n_tokens_; }

  struct Match {
    size_t pos = 0;   // byte offset in the text
    size_t len = 0;   // 0: no match
    TokenId id = -1;
  };
  // The leftmost-longest match in text at or after byte `from`.
  Match find(std::string_view text, size_t from) const;

 private:
  int32_t child(int32_t node, unsigned char b) const {
    auto it = edges_.find((static_cast<uint64_t>(node) << 8) | b);
    return it == edges_.end() ? -1 : it->second;
  }

  std::vector<TokenId> node_token_;                // per node: the token ending here, or -1
  std::unordered_map<uint64_t, int32_t> edges_;    // (node << 8 | byte) → child node
  std::array<bool, 256> first_byte_{};             // bytes that start some token
  size_t n_tokens_ = 0;
};

}  // namespace mla::tok
