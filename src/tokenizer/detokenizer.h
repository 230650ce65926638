#pragma once
// Incremental detokenizer for streaming: feed ids one at a time, get text deltas that are
// always valid UTF-8 and never split a character.
//
// Contract: the concatenation of every feed() delta and the final finish() equals
// decode_text(ids) — the token bytes with each maximal invalid UTF-8 subpart replaced by one
// U+FFFD (Python's errors="replace", Rust's from_utf8_lossy). A byte sequence that may still
// become a valid character is held back (at most 3 bytes) until the next token decides it;
// finish() flushes a held-back incomplete tail as one U+FFFD.
#include <string>
#include <string_view>

#include "tokenizer/tokenizer.h"

namespace mla {

class StreamDetokenizer {
 public:
  // skip_special: CONTROL/UNKNOWN tokens add nothing (else their text).
  explicit StreamDetokenizer(const Tokenizer& tok, bool skip_special = false)
      : tok_(&tok), skip_special_(skip_special) {}

  // Appends the newly completed text to delta; returns the number of bytes appended.
  // Throws mla::Error on an id out of range.
  size_t feed(TokenId id, std::string& delta);
  std::string feed(TokenId id) {
    std::string d;
    feed(id, d);
    return d;
  }
  // Ends the stream (appending any held-back tail as U+FFFD); the detokenizer can be reused.
  size_t finish(std::string& delta);
  std::string finish() {
    std::string d;
    finish(d);
    return d;
  }
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  std::string pending_;  // undecided bytes: a proper prefix of a UTF-8 sequence
};

}  // namespace mla
