#pragma once
// Constrained decoding (structured outputs) on xgrammar's C++ core.
//
//   GrammarCompiler compiler(tokenizer, n_vocab, eos_ids);              // once per model
//   params.grammar = compiler.compile(GrammarSpec::json_schema(text));  // throws mla::Error
//   // the engine then gives each sequence of that request a GrammarMatcher: the token mask is
//   // filled before sampling, the sampled token accepted after, and the sequence ends (finish
//   // reason stop) when the grammar has ended.
//
// This is the interface for anything that wants "constrain this sequence with grammar G": the
// OpenAI `response_format` / `structured_outputs` fields, and tool_choice required / a named
// function (a JSON schema, an EBNF grammar or an xgrammar structural tag built by the caller).
// No xgrammar header leaks out of src/grammar/.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mla {

class Tokenizer;

// What to constrain the output to. Build with the named constructors.
struct GrammarSpec {
  enum class Kind {
    kJsonObject,     // any JSON object
    kJsonSchema,     // JSON text that validates against `source` (a JSON Schema, as JSON text)
    kRegex,          // text matching `source` entirely (xgrammar's regex dialect, ECMAScript-like)
    kChoice,         // exactly one of `choices`
    kEbnf,           // xgrammar EBNF (GBNF-style) with a rule named `root`
    kStructuralTag,  // xgrammar structural tag JSON (free text with tagged constrained parts)
  };
  Kind kind = Kind::kJsonObject;
  std::string source;
  std::vector<std::string> choices;
  // JSON kinds: whitespace allowed between JSON tokens wherever JSON allows it (vLLM's default);
  // false: the compact form, no free whitespace.
  bool any_whitespace = true;
  // JSON kinds with any_whitespace: at most this many whitespace characters in one gap between
  // JSON tokens (0: no limit; -1: the compiler's default).
  int max_whitespace = -1;

  static GrammarSpec json_object(bool any_whitespace = true);
  static GrammarSpec json_schema(std::string schema_json, bool any_whitespace = true);
  static GrammarSpec regex(std::string pattern);
  static GrammarSpec choice(std::vector<std::string> choices);
  static GrammarSpec ebnf(std::string grammar);
  static GrammarSpec structural_tag(std::string tag_json);

  // The cache key: kind, options and source; equal keys compile to the same grammar.
  std::string key() const;
};

std::string_view to_string(GrammarSpec::Kind k);  // "json_object", "json_schema", "regex", ...

// The EBNF of a kChoice spec: root ::= "a" | "b" ..., each choice a string literal with '"',
// '\' and control characters escaped. Throws mla::Error for no choices.
std::string choice_ebnf(std::span<const std::string> choices);

struct CompiledGrammarImpl;

// A grammar compiled against one vocabulary: immutable and shared by every sequence using it.
class CompiledGrammar {
 public:
  explicit CompiledGrammar(std::unique_ptr<CompiledGrammarImpl> impl, int n_vocab);
  ~CompiledGrammar();
  int n_vocab() const { return n_vocab_; }  // the logits width it was compiled for
  size_t memory_bytes() const;
  const CompiledGrammarImpl& impl() const { return *impl_; }

 private:
  std::unique_ptr<CompiledGrammarImpl> impl_;
  int n_vocab_;
};

// One sequence's position in the grammar. Not thread-safe; the engine calls fill_mask on its mask
// worker and accept on its own thread, never at the same time.
class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);
  ~GrammarMatcher();
  GrammarMatcher(GrammarMatcher&&) noexcept;
  GrammarMatcher& operator=(GrammarMatcher&&) noexcept;

  // Writes the allowed-token mask for the next token (token_mask_words(n_vocab) words, see
  // token_mask.h). Returns false when every token is allowed (the mask need not be applied).
  bool fill_mask(std::span<uint32_t> mask);
  // Advances by one sampled token; false (state unchanged) when the grammar does not allow it.
  bool accept(int32_t token);
  // Advances by text, without token boundaries (for checking what a grammar accepts); false
  // (state unchanged) when the grammar does not allow it.
  bool accept_text(std::string_view text);
  // Whether the text accepted so far is a complete match (a stop token would end it).
  bool can_end() const;
  // The grammar has ended: a stop token was accepted after a complete match.
  bool terminated() const;
  const CompiledGrammar& grammar() const { return *grammar_; }

 private:
  struct Impl;
  std::shared_ptr<const CompiledGrammar> grammar_;
  std::unique_ptr<Impl> impl_;
};

// The token bytes xgrammar matches against, per id (a RAW vocabulary): the bytes a token decodes
// to; "" for tokens that never appear in constrained text (CONTROL, UNKNOWN, UNUSED, BYTE-type
// placeholders), which xgrammar treats as special and never allows. Padding ids past the
// vocabulary up to n_vocab are special too. Except: a CONTROL token whose text occurs inside one
// of `markers` keeps its text, so a grammar can write it (tool-call markers such as DeepSeek's
// <｜tool▁calls▁begin｜> are CONTROL tokens; see server/tool_choice.h).
std::vector<std::string> grammar_vocab(const Tokenizer& tok, std::span<const std::string> markers = {});

// An xgrammar error message for a client: one line, without its time stamp, source location,
// "Check failed: (...) is false:" and the echo of the input JSON.
std::string clean_xgrammar_message(std::string_view what);

// Compiles specs against one vocabulary, with a cache of compiled grammars by GrammarSpec::key()
// (least recently used dropped past max_cached). Thread-safe.
class GrammarCompiler {
 public:
  // vocab: grammar_vocab(tokenizer); n_vocab: the logits width (>= vocab.size(), padding ids are
  // never allowed); stop_ids: the tokens that end a finished grammar (the engine's EOS ids).
  // json_max_whitespace: the per-gap whitespace limit of JSON specs that leave it to the compiler
  // (0: none, as vLLM). Without a limit a model that favours newlines can fill max_tokens with
  // them and never close the JSON; 16 still lets pretty-printed JSON nest a few levels.
  GrammarCompiler(const std::vector<std::string>& vocab, int n_vocab, const std::vector<int32_t>& stop_ids,
                  int n_threads = 2, size_t max_cached = 64, int json_max_whitespace = kDefaultJsonMaxWhitespace);
  static constexpr int kDefaultJsonMaxWhitespace = 16;
  ~GrammarCompiler();

  // Throws mla::Error naming the spec's kind and the problem (invalid JSON, an unsupported
  // schema feature, a regex or EBNF syntax error with its position).
  std::shared_ptr<const CompiledGrammar> compile(const GrammarSpec& spec);

  int n_vocab() const { return n_vocab_; }
  int json_max_whitespace() const { return json_max_whitespace_; }
  size_t n_cached() const;
  uint64_t n_cache_hits() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int n_vocab_;
  int json_max_whitespace_;
};

}  // namespace mla
