#pragma once
// Token ids → text for the engine's outputs. A TextDecoder starts one IncrementalDecoder per
// sequence; the engine feeds it every generated token (except EOS and stop tokens). Deltas are
// whole UTF-8 characters: bytes of an unfinished character are held until the token that
// completes it arrives (or flush()).
//
// TokenizerDecoder is the one real TextDecoder (mla serve, run and bench): the byte-level BPE
// tokenizer's StreamDetokenizer per sequence, so the deltas concatenate to its decode_text.
// Tests write their own TextDecoders.
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace mla {

class Tokenizer;  // tokenizer/tokenizer.h

class IncrementalDecoder {
 public:
  virtual ~IncrementalDecoder() = default;
  // The text this token adds (possibly empty).
  virtual std::string push(int32_t token) = 0;
  // At the end of the sequence: whatever is still held (an incomplete character as U+FFFD).
  virtual std::string flush() = 0;
};

class TextDecoder {
 public:
  virtual ~TextDecoder() = default;
  // prompt: context for decoders whose first piece depends on what precedes it.
  virtual std::unique_ptr<IncrementalDecoder> start(std::span<const int32_t> prompt,
                                                    bool skip_special_tokens) const = 0;
};

class TokenizerDecoder : public TextDecoder {
 public:
  // Keeps the tokenizer alive as long as the decoder or any IncrementalDecoder it started.
  explicit TokenizerDecoder(std::shared_ptr<const Tokenizer> tok) : tok_(std::move(tok)) {}
  std::unique_ptr<IncrementalDecoder> start(std::span<const int32_t> prompt, bool skip_special_tokens) const override;

 private:
  std::shared_ptr<const Tokenizer> tok_;
};

}  // namespace mla
