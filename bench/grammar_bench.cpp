// Structured-output costs per generated token, single-threaded (the engine fills each
// constrained sequence's mask on its mask worker while the forward pass runs):
//
//   grammar/mask/<vocab>   fill_mask + accept for each token of a JSON document that matches
//                          the schema below (an array of objects with free strings): the time a
//                          constrained token costs, to compare with a forward step's time
//   grammar/apply/<vocab>  apply_token_mask on one logits row with that mask
//   grammar/compile/<vocab> compiling the schema (what the compile cache saves per request)
//
// <vocab>: tiny (models/tiny-q8_0.gguf, 4,096 tokens) and deepseek-llm (102,400 tokens, the
// shared test vocabulary next to the repository; skipped when it is absent).
#include <benchmark/benchmark.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/token_mask.h"
#include "tokenizer/tokenizer.h"

namespace mla {
namespace {

const char* kSchema = R"({"type":"array","minItems":1,"items":{"type":"object","properties":{
  "name":{"type":"string"},"doc":{"type":"string"},"args":{"type":"array","items":{"type":"string"}}},
  "required":["name","doc","args"]}})";

const char* kDocument =
    R"([{"name": "open", "doc": "Open file and return a corresponding file object.", "args": ["file", "mode", "buffering"]}, )"
    R"({"name": "print", "doc": "Print objects to the text stream file, separated by sep.", "args": ["objects", "sep", "end"]}])";

struct Setup {
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<GrammarCompiler> compiler;
  std::shared_ptr<const CompiledGrammar> grammar;
  std::vector<int32_t> doc_ids;
};

// Built on first use, not at static initialization: xgrammar's own statics (its recursion
// limit) are not set up yet then.
Setup* setup_for(const std::string& path) {
  static std::map<std::string, std::unique_ptr<Setup>> cache;
  if (auto it = cache.find(path); it != cache.end()) return it->second.get();
  if (!std::filesystem::exists(path)) return cache[path].get();
  auto* s = new Setup;
  s->tok = Tokenizer::open(path);
  const int n_vocab = static_cast<int>(s->tok->n_tokens());
  std::vector<int32_t> stop = {s->tok->vocab().eos};
  s->compiler = std::make_unique<GrammarCompiler>(grammar_vocab(*s->tok), n_vocab, stop, 1);
  s->grammar = s->compiler->compile(GrammarSpec::json_schema(kSchema));
  s->doc_ids = s->tok->encode(kDocument);
  cache[path].reset(s);
  return s;
}

void bm_mask(benchmark::State& st, const std::string& path) {
  Setup* s = setup_for(path);
  if (!s) return st.SkipWithError("vocabulary file not found");
  std::vector<uint32_t> mask(token_mask_words(s->grammar->n_vocab()));
  int64_t n = 0;
  for (auto _ : st) {
    GrammarMatcher m(s->grammar);
    for (int32_t t : s->doc_ids) {
      m.fill_mask(mask);
      if (!m.accept(t)) return st.SkipWithError("the document does not match the schema");
    }
    n += static_cast<int64_t>(s->doc_ids.size());
  }
  st.counters["tokens"] = benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsRate);
}

void bm_apply(benchmark::State& st, const std::string& path) {
  Setup* s = setup_for(path);
  if (!s) return st.SkipWithError("vocabulary file not found");
  const int n_vocab = s->grammar->n_vocab();
  std::vector<uint32_t> mask(token_mask_words(n_vocab));
  GrammarMatcher m(s->grammar);
  m.fill_mask(mask);  // the opening '[': few tokens allowed, the worst case for skipping words
  std::vector<float> logits(n_vocab, 1.0f), row(n_vocab);
  for (auto _ : st) {
    row = logits;
    apply_token_mask(row, mask);
    benchmark::DoNotOptimize(row.data());
  }
}

void bm_compile(benchmark::State& st, const std::string& path) {
  Setup* s = setup_for(path);
  if (!s) return st.SkipWithError("vocabulary file not found");
  for (auto _ : st) {
    GrammarCompiler c(grammar_vocab(*s->tok), static_cast<int>(s->tok->n_tokens()), {s->tok->vocab().eos}, 1);
    benchmark::DoNotOptimize(c.compile(GrammarSpec::json_schema(kSchema)));
  }
}

int register_all() {
  const std::string root = MLA_SOURCE_DIR;
  const std::pair<const char*, std::string> vocabs[] = {
      {"tiny", root + "/models/tiny-q8_0.gguf"},
      {"deepseek-llm", root + "/../shared/data/vocab/ggml-vocab-deepseek-llm.gguf"}};
  for (const auto& [name, path] : vocabs) {
    benchmark::RegisterBenchmark((std::string("grammar/mask/") + name).c_str(), bm_mask, path)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string("grammar/apply/") + name).c_str(), bm_apply, path)
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark((std::string("grammar/compile/") + name).c_str(), bm_compile, path)
        ->Unit(benchmark::kMillisecond);
  }
  return 0;
}

const int registered = register_all();

}  // namespace
}  // namespace mla
