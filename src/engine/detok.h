#pragma once
// Token ids → text for the engine's outputs. The tokenizer provides a TextDecoder; the engine
// starts one IncrementalDecoder per sequence and feeds it every generated token (except EOS and
// stop tokens). Deltas are whole UTF-8 characters: bytes of an unfinished character are held
// until the token that completes it arrives (or flush()).
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace mla {

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

}  // namespace mla
