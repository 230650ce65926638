// Pre-tokenizers: pieces for fixed inputs as HF tokenizers produces them (computed with PyPI
// tokenizers 0.21.1 from the models' pre_tokenizer definitions), and invariants on arbitrary
// bytes. tests/py/test_tokenizer_hf.py compares every pre-tokenizer with HF on a large corpus.
#include <gtest/gtest.h>

#include <random>

#include "tokenizer/pretokenizer.h"
#include "util/error.h"

namespace mla {
namespace {

using Pieces = std::vector<std::string>;

Pieces split(const std::string& name, std::string_view text) {
  auto pre = tok::PreTokenizer::create(name);
  std::vector<std::string_view> views;
  pre->split(text, views);
  return Pieces(views.begin(), views.end());
}

TEST(PreTokenizer, DeepseekV3MatchesHf) {
  EXPECT_EQ(split("deepseek-v3", "Hello World! It's 1234567 apples.\n\n  x"),
            (Pieces{"Hello", " World", "!", " It", "'s", " ", "123", "456", "7", " apples", ".\n\n", " ", " x"}));
  EXPECT_EQ(split("deepseek-v3", "中文ひらがなカタカナabc"), (Pieces{"中文ひらがなカタカナ", "abc"}));
  EXPECT_EQ(split("deepseek-v3", "a\u0085b\u3000\u3000c"), (Pieces{"a", "\u0085b", "\u3000", "\u3000c"}));
  EXPECT_EQ(split("deepseek-v3", "'re (x) ++y"), (Pieces{"'re", " (", "x", ")", " ++", "y"}));
  EXPECT_EQ(split("deepseek-v3", "  \t\n\r\n z"), (Pieces{"  \t\n\r\n", " z"}));
}

TEST(PreTokenizer, Gpt2AndLlama3MatchHf) {
  EXPECT_EQ(split("gpt-2", "Hello World! It's 1234567 apples.\n\n  x"),
            (Pieces{"Hello", " World", "!", " It", "'s", " 1234567", " apples", ".", "\n\n ", " x"}));
  // U+0085 is White_Space for Oniguruma (HF): a piece of its own here.
  EXPECT_EQ(split("gpt-2", "a\u0085b  c  "), (Pieces{"a", "\u0085", "b", " ", " c", "  "}));
  // (?i:'s) also takes "'S" and "'ſ" (U+017F folds to s).
  EXPECT_EQ(split("llama-bpe", "HE'S 12345 x'\u017Fy"), (Pieces{"HE", "'S", " ", "123", "45", " x", "'\u017F", "y"}));
}

TEST(PreTokenizer, KimiSplitsHanByScriptNotScriptExtensions) {
  // "、" (U+3001) has Script=Common (Script_Extensions include Han): not part of a Han run.
  EXPECT_EQ(split("kimi-k2", "鎻、闫"), (Pieces{"鎻", "、", "闫"}));
  EXPECT_EQ(split("kimi-k2", "Hello世界WORLDs HELLOworld it's 12345"),
            (Pieces{"Hello", "世界", "WORLDs", " HELLOworld", " it's", " ", "123", "45"}));
}

TEST(PreTokenizer, TranslatesOnigurumaSpellingToPcre2) {
  EXPECT_EQ(tok::hf_regex_to_pcre2("[^\\s\\p{L}]\\S\\\\s\\p{Han}\\p{Lu}\\P{N}"),
            "[^\\p{White_Space}\\p{L}]\\P{White_Space}\\\\s\\p{sc:Han}\\p{Lu}\\P{N}");
}

TEST(PreTokenizer, UnknownNameListsTheKnownOnes) {
  try {
    tok::PreTokenizer::create("bogus");
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("'bogus'"), std::string::npos);
    for (const char* n : {"deepseek-v3", "deepseek-llm", "deepseek-coder", "glm4", "chatglm-bpe", "kimi-k2",
                          "llama-bpe", "llama3", "smollm", "qwen2", "gpt-2", "default"})
      EXPECT_NE(m.find(n), std::string::npos) << n;
  }
}

TEST(PreTokenizer, EverySpecCoversArbitraryBytesExactly) {
  std::mt19937 rng(3);
  const char* alphabet[] = {"a", "Z", " ", "  ", "\n", "\r\n", "\t", "1", "234", "'s", "!", "中", "ひ", "é", "\xCC\x81",
                            "\xF0\x9F\x98\x80", "\xFF", "\xC3", "\x80", "\xE2\x82", "\u3000", "\u0085", "\xEF\xBD\x9C"};
  for (const auto& spec : tok::pretokenizer_specs()) {
    tok::PreTokenizer pre(spec);
    for (int iter = 0; iter < 200; ++iter) {
      std::string s;
      for (int k = rng() % 25; k > 0; --k) s += alphabet[rng() % std::size(alphabet)];
      std::vector<std::string_view> pieces;
      pre.split(s, pieces);
      std::string joined;
      for (auto p : pieces) {
        EXPECT_FALSE(p.empty()) << spec.name;
        joined += p;
      }
      EXPECT_EQ(joined, s) << spec.name;
    }
  }
}

TEST(PreTokenizer, LongRunsDoNotFail) {
  // 256 KiB pieces exercise the JIT stack (and the interpreter fallback) on the slowest patterns.
  const std::string letters(256 * 1024, 'x'), spaces(256 * 1024, ' ');
  for (const char* name : {"kimi-k2", "deepseek-v3", "llama-bpe"}) {
    auto pre = tok::PreTokenizer::create(name);
    for (const auto* s : {&letters, &spaces}) {
      std::vector<std::string_view> pieces;
      pre->split(*s, pieces);
      size_t total = 0;
      for (auto p : pieces) total += p.size();
      EXPECT_EQ(total, s->size()) << name;
    }
  }
}

}  // namespace
}  // namespace mla
