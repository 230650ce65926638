#include "tokenizer/detokenizer.h"

#include "tokenizer/utf8.h"
#include "util/error.h"

namespace mla {

size_t StreamDetokenizer::feed(TokenId id, std::string& delta) {
  if (!tok_->is_valid(id)) fail("tokenizer: token id {} is out of range [0, {})", id, tok_->n_tokens());
  const size_t before = delta.size();
  std::string_view bytes = tok_->token_bytes(id, !skip_special_);
  if (pending_.empty()) {
    size_t used = tok::utf8_sanitize_append(bytes, false, delta);
    pending_.assign(bytes.substr(used));
  } else {
    pending_.append(bytes);
    size_t used = tok::utf8_sanitize_append(pending_, false, delta);
    pending_.erase(0, used);
  }
  return delta.size() - before;
}

size_t StreamDetokenizer::finish(std::string& delta) {
  const size_t before = delta.size();
  tok::utf8_sanitize_append(pending_, true, delta);
  pending_.clear();
  return delta.size() - before;
}

}  // namespace mla
