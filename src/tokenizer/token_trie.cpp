#include "tokenizer/token_trie.h"


namespace mla::tok {

TokenTrie::TokenTrie() { node_token_.push_back(-1); }

void TokenTrie::insert(std::string_view text, TokenId id) {
  if (text.empty()) return;
  int32_t node = 0;
  for (unsigned char b : text) {
    int32_t next = child(node, b);
    if (next < 0) {
      next = static_cast<int32_t>(node_token_.size());
      node_token_.push_back(-1);
      edges_.emplace((static_cast<uint64_t>(node) << 8) | b, next);
    }
    node = next;
  }
  if (node_token_[node] < 0) {
    node_token_[node] = id;
    ++n_tokens_;
  }
  first_byte_[static_cast<unsigned char>(text[0])] = true;
}

TokenTrie::Match TokenTrie::find(std::string_view text, size_t from) const {
  if (n_tokens_ == 0) return {};
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = from; i < n; ++i) {
    if (!first_byte_[p[i]]) continue;
    Match best;
    int32_t node = 0;
    for (size_t j = i; j < n; ++j) {
      node = child(node, p[j]);
      if (node < 0) break;
      if (node_token_[node] >= 0) best = {i, j + 1 - i, node_token_[node]};
    }
    if (best.len > 0) return best;
  }
  return {};
}

}  // namespace mla::tok
