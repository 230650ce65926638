#pragma once
// The engine's TextDecoder over the BPE tokenizer: one StreamDetokenizer per sequence, so text
// deltas are whole UTF-8 characters and concatenate to the tokenizer's decode_text.
#include <memory>

#include "engine/detok.h"
#include "tokenizer/tokenizer.h"

namespace mla::server {

class TokenizerDecoder : public TextDecoder {
 public:
  // tok must outlive the decoder and every IncrementalDecoder it starts.
  explicit TokenizerDecoder(const Tokenizer& tok) : tok_(tok) {}
  std::unique_ptr<IncrementalDecoder> start(std::span<const int32_t> prompt, bool skip_special_tokens) const override;

 private:
  const Tokenizer& tok_;
};

}  // namespace mla::server
