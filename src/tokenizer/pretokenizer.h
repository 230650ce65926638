#pragma once
// Pre-tokenizers: split text into pieces before BPE, exactly as HF tokenizers' pre_tokenizer
// pipelines do, selected by the GGUF key tokenizer.ggml.pre.
//
// Every step is a regex split with HF "Isolated" semantics: matches and the gaps between them
// both become pieces, and each step re-splits every piece of the previous step on its own (a
// lookahead or `$` never sees past the piece). Patterns are kept in HF (Oniguruma) spelling —
// the converter compares them with tokenizer.json — and run through PCRE2 (UTF, UCP, JIT,
// MATCH_INVALID_UTF: invalid UTF-8 bytes match nothing and so end up in gap pieces).
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mla::tok {

enum class PreStepKind : uint8_t {
  SPLIT,       // Split(Regex(pattern), behavior="Isolated")
  DIGITS,      // Digits(individual_digits=true): every \p{N} character is its own piece
  BYTE_LEVEL,  // ByteLevel(use_regex=true): a Split on the GPT-2 regex
};

struct PreStep {
  PreStepKind kind = PreStepKind::SPLIT;
  std::string pattern;  // SPLIT: the HF (Oniguruma) pattern
  std::string pcre2;    // SPLIT: the PCRE2 spelling when the HF one has none (class
                        // intersection `&&`); empty: derived with hf_regex_to_pcre2(pattern)
};

struct PreTokenizerSpec {
  std::string name;                  // the tokenizer.ggml.pre value llama.cpp writes
  std::vector<std::string> aliases;  // other tokenizer.ggml.pre values with the same behaviour
  std::vector<PreStep> steps;
  bool ignore_merges = false;  // a piece that is itself a vocab token is not merged further
  bool add_bos = false;        // default of tokenizer.ggml.add_bos_token when the key is absent
  bool detectable = true;      // vocab-from-hf may pick it from tokenizer.json's pre_tokenizer
};

// Known pre-tokenizers, in detection-priority order.
const std::vector<PreTokenizerSpec>& pretokenizer_specs();
// By name or alias; nullptr when unknown.
const PreTokenizerSpec* find_pretokenizer_spec(std::string_view name);
// "deepseek-v3, deepseek-llm, ..." (names only) for error messages.
std::string pretokenizer_names();

// Oniguruma (HF) pattern → PCRE2 pattern. \s and \S become \p{White_Space} / \P{White_Space}
// (Oniguruma's \s is the Unicode White_Space property, which includes U+0085; PCRE2's UCP \s
// does not); a bare script name \p{Han} becomes \p{sc:Han} (Script, as in Oniguruma and Rust
// regex, not PCRE2's default Script_Extensions). Everything else used by the known patterns
// is spelled alike in both.
std::string hf_regex_to_pcre2(std::string_view pattern);

class PreTokenizer {
 public:
  // Throws mla::Error("unknown pre-tokenizer 'x' (known: ...)").
  static std::unique_ptr<PreTokenizer> create(std::string_view name);
  // Compiles every step; throws mla::Error naming the step when PCRE2 rejects a pattern.
  explicit PreTokenizer(const PreTokenizerSpec& spec);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  const PreTokenizerSpec& spec() const { return spec_; }

  // Appends the pieces of text to out: non-empty views into text that concatenate back to it.
  // Thread-safe (per-thread match buffers).
  void split(std::string_view text, std::vector<std::string_view>& out) const;

  struct Regex;  // one compiled step (PCRE2 code)

 private:
  PreTokenizerSpec spec_;
  std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace mla::tok
