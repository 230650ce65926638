// GrammarCompiler / GrammarMatcher on a hand-made vocabulary: which tokens each kind of spec
// allows (read off the grammar by hand), termination at the stop token, errors naming the
// problem, the compile cache, and the engine running a constrained request next to free ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <set>

#include "../engine/engine_harness.h"
#include "../engine/fake_runner.h"
#include "grammar/grammar.h"
#include "grammar/token_mask.h"
#include "util/error.h"

namespace mla {
namespace {

// id 0 is EOS (the stop token); ids past the vocabulary up to kNVocab are padding.
const std::vector<std::string> kVocab = {"",   "y", "e", "s", "yes", "n", "o", "no", "x",     "\"", "\\",
                                         "\n", "{", "}", ":", "a",   "1", "2", " ",  "\"a\"", ","};
constexpr int kNVocab = 24;

GrammarCompiler make_compiler() { return GrammarCompiler(kVocab, kNVocab, {0}, 1, 4); }

std::set<int> allowed(GrammarMatcher& m) {
  std::vector<uint32_t> mask(token_mask_words(kNVocab));
  m.fill_mask(mask);
  std::set<int> ids;
  for (int i = 0; i < kNVocab; ++i)
    if (token_allowed(mask, i)) ids.insert(i);
  return ids;
}

TEST(Grammar, ChoiceAllowsThePrefixesOfEachChoiceThenOnlyTheStopToken) {
  auto c = make_compiler();
  GrammarMatcher m(c.compile(GrammarSpec::choice({"yes", "no"})));
  EXPECT_EQ(allowed(m), (std::set<int>{1, 4, 5, 7}));  // y, yes, n, no
  ASSERT_TRUE(m.accept(1));                            // "y"
  EXPECT_EQ(allowed(m), (std::set<int>{2}));           // "e"
  EXPECT_FALSE(m.accept(3));                           // "s" now is refused
  ASSERT_TRUE(m.accept(2));
  ASSERT_TRUE(m.accept(3));
  EXPECT_FALSE(m.terminated());
  EXPECT_EQ(allowed(m), (std::set<int>{0}));
  ASSERT_TRUE(m.accept(0));
  EXPECT_TRUE(m.terminated());
}

TEST(Grammar, ChoiceTextIsEscaped) {
  const std::vector<std::string> choices = {"a\"\\\n"};
  EXPECT_EQ(choice_ebnf(choices), "root ::= \"a\\\"\\\\\\x0a\"");
  auto c = make_compiler();
  GrammarMatcher m(c.compile(GrammarSpec::choice(choices)));
  for (int t : {15, 9, 10, 11}) ASSERT_TRUE(m.accept(t)) << t;  // a " \ newline
  EXPECT_EQ(allowed(m), (std::set<int>{0}));
  EXPECT_THROW(choice_ebnf({}), Error);
}

TEST(Grammar, RegexAndEbnf) {
  auto c = make_compiler();
  GrammarMatcher r(c.compile(GrammarSpec::regex("[12]+")));
  EXPECT_EQ(allowed(r), (std::set<int>{16, 17}));
  ASSERT_TRUE(r.accept(16));
  EXPECT_EQ(allowed(r), (std::set<int>{0, 16, 17}));

  GrammarMatcher g(c.compile(GrammarSpec::ebnf("root ::= \"x\" (\"1\" | \"2\")")));
  EXPECT_EQ(allowed(g), (std::set<int>{8}));
  ASSERT_TRUE(g.accept(8));
  EXPECT_EQ(allowed(g), (std::set<int>{16, 17}));
}

TEST(Grammar, JsonSchemaRequiredPropertyAndNoPaddingIds) {
  auto c = make_compiler();
  const std::string schema = R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})";
  GrammarMatcher m(c.compile(GrammarSpec::json_schema(schema)));
  auto first = allowed(m);
  EXPECT_TRUE(first.count(12));  // {
  EXPECT_FALSE(first.count(8));  // x
  EXPECT_FALSE(first.count(0));  // nothing yet: no stop
  for (int pad = static_cast<int>(kVocab.size()); pad < kNVocab; ++pad) EXPECT_FALSE(first.count(pad));
  ASSERT_TRUE(m.accept(12));
  auto after_brace = allowed(m);
  EXPECT_FALSE(after_brace.count(13)) << "'a' is required: '}' cannot come yet";
  EXPECT_TRUE(after_brace.count(19));                            // "a"
  for (int t : {19, 14, 16, 13}) ASSERT_TRUE(m.accept(t)) << t;  // "a" : 1 }
  EXPECT_TRUE(allowed(m).count(0));
  ASSERT_TRUE(m.accept(0));
  EXPECT_TRUE(m.terminated());

  GrammarMatcher obj(c.compile(GrammarSpec::json_object()));
  EXPECT_EQ(allowed(obj).count(12), 1u);
  EXPECT_EQ(allowed(obj).count(16), 0u);  // a number is JSON but not an object
}

TEST(Grammar, InvalidSpecsNameTheKindAndTheProblem) {
  auto c = make_compiler();
  auto message = [&](const GrammarSpec& s) {
    try {
      c.compile(s);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto m1 = message(GrammarSpec::json_schema("{\"type\": \"object\""));
  EXPECT_NE(m1.find("invalid json_schema"), std::string::npos) << m1;
  auto m2 = message(GrammarSpec::regex("[a-"));
  EXPECT_NE(m2.find("invalid regex"), std::string::npos) << m2;
  auto m3 = message(GrammarSpec::ebnf("root ::= "));
  EXPECT_NE(m3.find("invalid grammar"), std::string::npos) << m3;
  auto m4 = message(GrammarSpec::ebnf("start ::= \"a\""));
  EXPECT_NE(m4.find("root"), std::string::npos) << m4;
  for (const auto& m : {m1, m2, m3, m4}) {
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_EQ(m.find(".cc:"), std::string::npos) << m;  // no source locations for clients
    EXPECT_EQ(m.find("Check failed"), std::string::npos) << m;
  }
  EXPECT_EQ(c.n_cached(), 0u);  // failures are not cached
}

TEST(Grammar, XgrammarMessagesAreCleanedForClients) {
  EXPECT_EQ(clean_xgrammar_message("[04:25:15] /x/cpp/json_schema_converter.cc:4939: Check failed: (error.empty()) is "
                                   "false: Failed to parse JSON: syntax error at line 1 near: not json. The JSON "
                                   "string is:{not json "),
            "Failed to parse JSON: syntax error at line 1 near: not json");
  EXPECT_EQ(clean_xgrammar_message("[04:25:15] /x/regex_converter.cc:83: Regex parsing error at "
                                   "position 4: Unclosed '[' "),
            "Regex parsing error at position 4: Unclosed '['");
  EXPECT_EQ(clean_xgrammar_message("line one\n   ^ "), "line one    ^");
}

TEST(Grammar, CompileCacheByKeyWithLruBound) {
  auto c = make_compiler();  // holds 4
  auto a = c.compile(GrammarSpec::regex("[12]+"));
  EXPECT_EQ(c.compile(GrammarSpec::regex("[12]+")), a);
  EXPECT_EQ(c.n_cache_hits(), 1u);
  EXPECT_NE(c.compile(GrammarSpec::json_object(true)), c.compile(GrammarSpec::json_object(false)));
  for (const char* r : {"1", "2", "12", "21"}) c.compile(GrammarSpec::regex(r));
  EXPECT_EQ(c.n_cached(), 4u);
  EXPECT_NE(c.compile(GrammarSpec::regex("[12]+")), a);  // dropped, compiled again
  EXPECT_NE(GrammarSpec::choice({"ab"}).key(), GrammarSpec::choice({"a", "b"}).key());
}

// ---------------------------------------------------------------------------------------------
// The engine with a grammar, on the fake model (its vocabulary is kNVocab ids).

using testing::Arrival;
using testing::FakeRunner;

// The fake model over kNVocab ids and an engine whose EOS is id 0.
std::unique_ptr<ModelRunner> fake_runner() { return std::make_unique<FakeRunner>(kNVocab, 4, 64); }
EngineConfig engine_config() {
  EngineConfig cfg = testing::config(MlaPathPolicy::Auto, 16, true);
  cfg.eos_token_ids = {0};
  return cfg;
}

SamplingParams greedy(int max_tokens, bool ignore_eos) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = ignore_eos;
  return p;
}

std::string text_of(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t t : ids) s += t < static_cast<int>(kVocab.size()) ? kVocab[t] : "";
  return s;
}

TEST(GrammarEngine, ConstrainedRequestFollowsItsGrammarAndLeavesOthersBitIdentical) {
  auto c = make_compiler();
  const EngineConfig cfg = engine_config();
  const SamplingParams free_p = greedy(12, true);
  SamplingParams regex_p = greedy(40, false);
  regex_p.grammar = c.compile(GrammarSpec::regex("x[12]{3,5}"));
  SamplingParams choice_p = regex_p;
  choice_p.temperature = 1.0f;
  choice_p.seed = 5;
  choice_p.n = 3;
  choice_p.grammar = c.compile(GrammarSpec::choice({"yes", "no", "a1"}));

  const std::vector<int32_t> p1 = {3, 5, 7, 9, 11}, p2 = {4, 6, 8};
  auto alone = testing::run_engine(fake_runner, cfg, {{"free", p1, free_p, 0}});
  auto mixed =
      testing::run_engine(fake_runner, cfg, {{"free", p1, free_p, 0}, {"re", p2, regex_p, 0}, {"ch", p1, choice_p, 1}});
  EXPECT_EQ(alone.seqs["free"][0].tokens, mixed.seqs["free"][0].tokens);
  EXPECT_EQ(alone.logits["free"], mixed.logits["free"]);

  const auto& re = mixed.seqs["re"][0];
  ASSERT_EQ(re.finish, FinishReason::kStop);
  ASSERT_FALSE(re.tokens.empty());
  EXPECT_EQ(re.tokens.back(), 0);  // ended with the stop token
  std::vector<int32_t> body(re.tokens.begin(), re.tokens.end() - 1);
  EXPECT_TRUE(std::regex_match(text_of(body), std::regex("x[12]{3,5}"))) << text_of(body);

  ASSERT_EQ(mixed.seqs["ch"].size(), 3u);
  for (const auto& s : mixed.seqs["ch"]) {
    ASSERT_EQ(s.finish, FinishReason::kStop);
    std::vector<int32_t> b(s.tokens.begin(), s.tokens.end() - 1);
    const std::string t = text_of(b);
    EXPECT_TRUE(t == "yes" || t == "no" || t == "a1") << t;
  }
}

TEST(GrammarEngine, GrammarEndStopsEvenWithIgnoreEos) {
  auto c = make_compiler();
  const EngineConfig cfg = engine_config();
  SamplingParams p = greedy(30, true);
  p.min_tokens = 10;  // the grammar decides: min_tokens does not hold back its EOS
  p.grammar = c.compile(GrammarSpec::choice({"no"}));
  auto r = testing::run_engine(fake_runner, cfg, {{"g", {1, 2, 3}, p, 0}});
  const auto& s = r.seqs["g"][0];
  EXPECT_EQ(s.finish, FinishReason::kStop);
  EXPECT_EQ(text_of(s.tokens), "no");
  EXPECT_EQ(s.tokens.back(), 0);
}

TEST(GrammarEngine, GrammarForAnotherVocabularyIsRefused) {
  GrammarCompiler other(kVocab, kNVocab + 8, {0}, 1, 4);
  SamplingParams p;
  p.grammar = other.compile(GrammarSpec::regex("1"));
  EXPECT_THROW(p.validate(kNVocab), Error);
  EXPECT_NO_THROW(p.validate(kNVocab + 8));
}

}  // namespace
}  // namespace mla
