#pragma once
// The engine's TextDecoder over the byte-level BPE tokenizer: one StreamDetokenizer per
// sequence, so text deltas are valid UTF-8 and never split a character.
#include <memory>

#include "engine/detok.h"
#include "tokenizer/tokenizer.h"

namespace mla {

class TokenizerDecoder : public TextDecoder {
 public:
  explicit TokenizerDecoder(std::shared_ptr<const Tokenizer> tok) : tok_(std::move(tok)) {}
  std::unique_ptr<IncrementalDecoder> start(std::span<const int32_t> prompt, bool skip_special_tokens) const override;

 private:
  std::shared_ptr<const Tokenizer> tok_;
};

}  // namespace mla
