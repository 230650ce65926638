// llama.cpp's tokenizer test vectors (tests/test-tokenizer-0: <vocab>.gguf.inp holds texts
// separated by "\n__ggml_vocab_test__\n", <vocab>.gguf.out one line of expected ids per text,
// produced by HF tokenizers with add_special_tokens=False). Encoded here without BOS/EOS and
// with parse_special=false, as that test does; every id must match.
#include <gtest/gtest.h>

#include <sstream>

#include "test_data.h"
#include "tokenizer/tokenizer.h"

namespace mla {
namespace {

struct Case {
  std::string text;
  std::vector<TokenId> ids;
};

std::vector<Case> read_vectors(const std::string& gguf) {
  const std::string inp = test::read_file(gguf + ".inp");
  const std::string out = test::read_file(gguf + ".out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < inp.size();) {
    size_t next = inp.find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(inp.substr(pos));
      break;
    }
    texts.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<Case> cases;
  std::istringstream lines(out);
  std::string line;
  for (size_t i = 0; std::getline(lines, line); ++i) {
    Case c;
    c.text = i < texts.size() ? texts[i] : std::string();
    std::istringstream ids(line);
    for (TokenId id; ids >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  EXPECT_EQ(cases.size(), texts.size()) << gguf << ": .inp and .out hold different numbers of tests";
  return cases;
}

class VocabVectors : public ::testing::TestWithParam<const char*> {};

TEST_P(VocabVectors, EveryTextGivesTheReferenceIds) {
  const std::string path = test::fixture_file(std::string("vocab/") + GetParam());
  ASSERT_FALSE(path.empty());
  auto tok = Tokenizer::open(path);
  auto cases = read_vectors(path);
  ASSERT_GE(cases.size(), 40u);
  EncodeOptions eo;
  eo.parse_special = false;
  size_t n_ok = 0;
  for (const auto& c : cases) {
    auto ids = tok->encode(c.text, eo);
    EXPECT_EQ(ids, c.ids) << "text: '" << c.text << "'";
    n_ok += ids == c.ids;
    EXPECT_EQ(tok->decode(ids), c.text) << "round trip of '" << c.text << "'";
  }
  EXPECT_EQ(n_ok, cases.size());
}

INSTANTIATE_TEST_SUITE_P(LlamaCpp, VocabVectors,
                         ::testing::Values("ggml-vocab-gpt-2.gguf", "ggml-vocab-deepseek-llm.gguf",
                                           "ggml-vocab-deepseek-coder.gguf"),
                         [](const auto& info) {
                           std::string n = info.param;
                           n = n.substr(11, n.size() - 16);  // "ggml-vocab-" ... ".gguf"
                           for (auto& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace mla
