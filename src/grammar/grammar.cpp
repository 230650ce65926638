// GrammarSpec → xgrammar compile (cached), and the per-sequence matcher (see grammar.h).
#include "grammar/grammar.h"

#include <xgrammar/xgrammar.h>

#include <fmt/format.h>

#include <algorithm>
#include <list>
#include <mutex>
#include <regex>
#include <unordered_map>

#include "grammar/token_mask.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace mla {

struct CompiledGrammarImpl {
  xgrammar::CompiledGrammar compiled{xgrammar::NullObj{}};
};

GrammarSpec GrammarSpec::json_object(bool any_whitespace) {
  return {.kind = Kind::kJsonObject, .any_whitespace = any_whitespace};
}
GrammarSpec GrammarSpec::json_schema(std::string schema_json, bool any_whitespace) {
  return {.kind = Kind::kJsonSchema, .source = std::move(schema_json), .any_whitespace = any_whitespace};
}
GrammarSpec GrammarSpec::regex(std::string pattern) { return {.kind = Kind::kRegex, .source = std::move(pattern)}; }
GrammarSpec GrammarSpec::choice(std::vector<std::string> choices) {
  return {.kind = Kind::kChoice, .choices = std::move(choices)};
}
GrammarSpec GrammarSpec::ebnf(std::string grammar) { return {.kind = Kind::kEbnf, .source = std::move(grammar)}; }
GrammarSpec GrammarSpec::structural_tag(std::string tag_json) {
  return {.kind = Kind::kStructuralTag, .source = std::move(tag_json)};
}

std::string GrammarSpec::key() const {
  // Length-prefixed parts, so no source text can be mistaken for a separator.
  std::string k = fmt::format("{}|{}|{}|", to_string(kind), any_whitespace ? 1 : 0, max_whitespace);
  auto add = [&](const std::string& s) { k += fmt::format("{}:", s.size()) + s; };
  add(source);
  for (const auto& c : choices) add(c);
  return k;
}

std::string_view to_string(GrammarSpec::Kind k) {
  switch (k) {
    case GrammarSpec::Kind::kJsonObject:
      return "json_object";
    case GrammarSpec::Kind::kJsonSchema:
      return "json_schema";
    case GrammarSpec::Kind::kRegex:
      return "regex";
    case GrammarSpec::Kind::kChoice:
      return "choice";
    case GrammarSpec::Kind::kEbnf:
      return "grammar";
    case GrammarSpec::Kind::kStructuralTag:
      return "structural_tag";
  }
  return "?";
}

std::string choice_ebnf(std::span<const std::string> choices) {
  if (choices.empty()) fail("choice: the list of choices is empty");
  std::string g = "root ::= ";
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i) g += " | ";
    g += '"';
    for (unsigned char c : choices[i]) {
      if (c == '"' || c == '\\') {
        g += '\\';
        g += static_cast<char>(c);
      } else if (c < 0x20 || c == 0x7f) {
        g += fmt::format("\\x{:02x}", c);
      } else {
        g += static_cast<char>(c);  // UTF-8 bytes pass through; the parser reads code points
      }
    }
    g += '"';
  }
  return g;
}

CompiledGrammar::CompiledGrammar(std::unique_ptr<CompiledGrammarImpl> impl, int n_vocab)
    : impl_(std::move(impl)), n_vocab_(n_vocab) {}
CompiledGrammar::~CompiledGrammar() = default;
size_t CompiledGrammar::memory_bytes() const { return impl_->compiled.MemorySizeBytes(); }

// ---------------------------------------------------------------------------------------------

struct GrammarMatcher::Impl {
  xgrammar::GrammarMatcher matcher;
};

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)),
      impl_(std::make_unique<Impl>(Impl{xgrammar::GrammarMatcher(grammar_->impl().compiled)})) {}
GrammarMatcher::~GrammarMatcher() = default;
GrammarMatcher::GrammarMatcher(GrammarMatcher&&) noexcept = default;
GrammarMatcher& GrammarMatcher::operator=(GrammarMatcher&&) noexcept = default;

bool GrammarMatcher::fill_mask(std::span<uint32_t> mask) {
  int64_t shape[1] = {token_mask_words(grammar_->n_vocab())};
  DLTensor t{};
  t.data = mask.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = DLDataType{kDLInt, 32, 1};
  t.shape = shape;
  return impl_->matcher.FillNextTokenBitmask(&t);
}

bool GrammarMatcher::accept(int32_t token) { return impl_->matcher.AcceptToken(token); }
bool GrammarMatcher::accept_text(std::string_view text) { return impl_->matcher.AcceptString(std::string(text)); }
bool GrammarMatcher::can_end() const { return impl_->matcher.IsCompleted(); }
bool GrammarMatcher::terminated() const { return impl_->matcher.IsTerminated(); }

// ---------------------------------------------------------------------------------------------

std::string clean_xgrammar_message(std::string_view what) {
  static const std::regex location(R"(\[\d\d:\d\d:\d\d\] \S+:\d+: )");
  static const std::regex check(R"(Check failed: \(.*?\) is false: )");
  static const std::regex echo(R"(\.? ?The JSON string is:[\s\S]*$)");
  std::string m(what);
  for (char& c : m)
    if (c == '\n' || c == '\r') c = ' ';  // one line (xgrammar may put a caret line under it)
  m = std::regex_replace(m, location, "");
  m = std::regex_replace(m, check, "");
  m = std::regex_replace(m, echo, "");
  const size_t end = m.find_last_not_of(' ');
  m.resize(end == std::string::npos ? 0 : end + 1);
  return m;
}

std::vector<std::string> grammar_vocab(const Tokenizer& tok, std::span<const std::string> markers) {
  std::vector<std::string> v(tok.n_tokens());
  for (size_t id = 0; id < v.size(); ++id) {
    const auto type = tok.vocab().types[id];
    if (type == TokenType::NORMAL || type == TokenType::USER_DEFINED) {
      v[id] = std::string(tok.token_bytes(static_cast<TokenId>(id), /*render_special=*/false));
    } else if (type == TokenType::CONTROL && !markers.empty()) {
      std::string text(tok.token_bytes(static_cast<TokenId>(id), /*render_special=*/true));
      const bool in_marker = std::any_of(markers.begin(), markers.end(),
                                         [&](const std::string& m) { return m.find(text) != std::string::npos; });
      if (text.size() >= 2 && in_marker) v[id] = std::move(text);
    }
  }
  return v;
}

struct GrammarCompiler::Impl {
  Impl(const xgrammar::TokenizerInfo& info, int n_threads, size_t max)
      : compiler(info, n_threads, /*cache_enabled=*/false), max_cached(max) {}
  xgrammar::GrammarCompiler compiler;
  size_t max_cached;
  mutable std::mutex mu;
  std::list<std::string> lru;  // most recently used first
  struct Entry {
    std::shared_ptr<const CompiledGrammar> grammar;
    std::list<std::string>::iterator pos;
  };
  std::unordered_map<std::string, Entry> cache;
  uint64_t n_hits = 0;
};

GrammarCompiler::GrammarCompiler(const std::vector<std::string>& vocab, int n_vocab,
                                 const std::vector<int32_t>& stop_ids, int n_threads, size_t max_cached,
                                 int json_max_whitespace)
    : n_vocab_(n_vocab), json_max_whitespace_(std::max(0, json_max_whitespace)) {
  if (n_vocab < static_cast<int>(vocab.size()))
    fail("grammar: n_vocab {} is less than the {} tokens of the vocabulary", n_vocab, vocab.size());
  for (int32_t t : stop_ids)
    if (t < 0 || t >= n_vocab) fail("grammar: stop token {} out of range [0, {})", t, n_vocab);
  xgrammar::TokenizerInfo info(vocab, xgrammar::VocabType::RAW, n_vocab, stop_ids,
                               /*add_prefix_space=*/false);
  // xgrammar's own cache is off: ours is keyed by the whole spec and bounded by entries.
  impl_ = std::make_unique<Impl>(info, std::max(1, n_threads), std::max<size_t>(1, max_cached));
}

GrammarCompiler::~GrammarCompiler() = default;

std::shared_ptr<const CompiledGrammar> GrammarCompiler::compile(const GrammarSpec& request) {
  GrammarSpec spec = request;
  if (spec.max_whitespace < 0) spec.max_whitespace = json_max_whitespace_;
  const std::string key = spec.key();
  {
    std::lock_guard lk(impl_->mu);
    auto it = impl_->cache.find(key);
    if (it != impl_->cache.end()) {
      impl_->lru.splice(impl_->lru.begin(), impl_->lru, it->second.pos);
      ++impl_->n_hits;
      return it->second.grammar;
    }
  }
  // Compiled outside the lock: a slow schema does not hold up the others.
  auto& xc = impl_->compiler;
  auto impl = std::make_unique<CompiledGrammarImpl>();
  try {
    using K = GrammarSpec::Kind;
    std::optional<int> max_ws;
    if (spec.any_whitespace && spec.max_whitespace > 0) max_ws = spec.max_whitespace;
    switch (spec.kind) {
      case K::kJsonObject:
        impl->compiled = xc.CompileJSONSchema(R"({"type": "object"})", spec.any_whitespace, std::nullopt, std::nullopt,
                                              /*strict_mode=*/false, max_ws);
        break;
      case K::kJsonSchema:
        impl->compiled = xc.CompileJSONSchema(spec.source, spec.any_whitespace, std::nullopt, std::nullopt,
                                              /*strict_mode=*/true, max_ws);
        break;
      case K::kRegex:
        impl->compiled = xc.CompileRegex(spec.source);
        break;
      case K::kChoice:
        impl->compiled = xc.CompileGrammar(choice_ebnf(spec.choices));
        break;
      case K::kEbnf:
        impl->compiled = xc.CompileGrammar(spec.source);
        break;
      case K::kStructuralTag:
        impl->compiled = xc.CompileStructuralTag(spec.source);
        break;
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("invalid {}: {}", to_string(spec.kind), clean_xgrammar_message(e.what()));
  }
  auto grammar = std::make_shared<const CompiledGrammar>(std::move(impl), n_vocab_);
  std::lock_guard lk(impl_->mu);
  auto it = impl_->cache.find(key);
  if (it != impl_->cache.end()) return it->second.grammar;  // compiled twice at once: keep one
  impl_->lru.push_front(key);
  impl_->cache.emplace(key, Impl::Entry{grammar, impl_->lru.begin()});
  while (impl_->cache.size() > impl_->max_cached) {
    impl_->cache.erase(impl_->lru.back());
    impl_->lru.pop_back();
  }
  return grammar;
}

size_t GrammarCompiler::n_cached() const {
  std::lock_guard lk(impl_->mu);
  return impl_->cache.size();
}

uint64_t GrammarCompiler::n_cache_hits() const {
  std::lock_guard lk(impl_->mu);
  return impl_->n_hits;
}

}  // namespace mla
