#pragma once
// Byte-level BPE tokenizer (tokenizer.ggml.model = "gpt2") loaded from GGUF metadata.
//
// encode: special/added tokens are cut out of the raw text first (leftmost-longest; CONTROL
// tokens only when parse_special, USER_DEFINED tokens always, as llama.cpp and HF do), the rest
// is pre-tokenized (tokenizer.ggml.pre) and every piece is merged by BPE. Invalid UTF-8 is not an
// error: its bytes go through BPE like any others, so decode(encode(x)) == x for every byte
// string x. decode returns bytes; decode_text / StreamDetokenizer return valid UTF-8.
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace mla {

namespace tok {
class PreTokenizer;
}

struct TokenizerOptions {
  std::string pre_override;  // use this pre-tokenizer instead of tokenizer.ggml.pre ("" = file's)
};

struct EncodeOptions {
  bool add_special = false;   // prepend BOS / append EOS where the vocab's add_bos/add_eos say so
  bool parse_special = true;  // false: CONTROL token text in the input is plain text (untrusted input)
};

class Tokenizer {
 public:
  // Throws mla::Error: not a gpt2 vocab, unknown pre-tokenizer (naming it, the known ones and
  // --tokenizer-pre), inconsistent metadata.
  static std::unique_ptr<Tokenizer> from_gguf(const GgufFile& f, const TokenizerOptions& opt = {});
  static std::unique_ptr<Tokenizer> open(const std::string& path, const TokenizerOptions& opt = {});
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  const Vocab& vocab() const { return vocab_; }
  size_t n_tokens() const { return vocab_.size(); }
  const std::string& pre_name() const;  // the pre-tokenizer in effect
  const tok::PreTokenizer& pre_tokenizer() const { return *pre_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }

  // Thread-safe.
  std::vector<TokenId> encode(std::string_view text, const EncodeOptions& opt = {}) const;
  void encode_append(std::string_view text, const EncodeOptions& opt, std::vector<TokenId>& out) const;

  // The bytes a token stands for. CONTROL/UNKNOWN tokens render as their text when
  // render_special, else as nothing; UNUSED/BYTE/UNDEFINED tokens as nothing. id must be valid.
  std::string_view token_bytes(TokenId id, bool render_special = true) const;
  // Concatenated token bytes (may be invalid UTF-8). Throws mla::Error on an id out of range.
  std::string decode(std::span<const TokenId> ids, bool skip_special = false) const;
  // decode, then every invalid UTF-8 subpart → U+FFFD.
  std::string decode_text(std::span<const TokenId> ids, bool skip_special = false) const;

  bool is_valid(TokenId id) const { return id >= 0 && static_cast<size_t>(id) < vocab_.size(); }
  bool is_special(TokenId id) const;  // CONTROL or UNKNOWN
  bool is_eog(TokenId id) const;      // ends generation: eos, eot, eom
  // The id whose stored text is exactly text, or -1.
  TokenId find_token(std::string_view text) const;

  struct Impl;

 private:
  Tokenizer();
  void encode_text(std::string_view text, bool parse_special, std::vector<TokenId>& out) const;
  void encode_plain(std::string_view text, std::vector<TokenId>& out) const;

  Vocab vocab_;
  std::unique_ptr<tok::PreTokenizer> pre_;
  std::unique_ptr<Impl> impl_;
  bool add_bos_ = false, add_eos_ = false;
};

}  // namespace mla
