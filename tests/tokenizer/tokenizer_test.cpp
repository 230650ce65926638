// Tokenizer behaviour on small synthetic vocabularies (expectations derived by hand from the
// BPE and added-token rules) and on llama.cpp's GPT-2 / DeepSeek vocab files.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "gguf/gguf.h"
#include "test_data.h"
#include "tokenizer/byte_level.h"
#include "util/error.h"

namespace mla {
namespace {

using Ids = std::vector<TokenId>;

// A vocab: ids 0..255 are the single bytes (byte-level text), then `extra` tokens.
struct SynthVocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<std::string> merges;
  std::string pre = "gpt-2";
  std::string model = "gpt2";
  std::vector<std::pair<std::string, GgufValue>> extra_keys;

  SynthVocab() {
    for (int b = 0; b < 256; ++b) {
      tokens.push_back(tok::byte_level_encode(std::string(1, static_cast<char>(b))));
      types.push_back(1);
    }
  }
  TokenId add(const std::string& text, TokenType type = TokenType::NORMAL) {
    tokens.push_back(text);
    types.push_back(static_cast<int32_t>(type));
    return static_cast<TokenId>(tokens.size() - 1);
  }
  std::vector<uint8_t> bytes() const {
    GgufWriter w;
    w.set("tokenizer.ggml.model", GgufValue::str(model));
    if (!pre.empty()) w.set("tokenizer.ggml.pre", GgufValue::str(pre));
    w.set("tokenizer.ggml.tokens", GgufValue::strings(tokens));
    w.set("tokenizer.ggml.token_type", GgufValue::i32s(types));
    if (!merges.empty()) w.set("tokenizer.ggml.merges", GgufValue::strings(merges));
    for (const auto& [k, v] : extra_keys) w.set(k, v);
    return w.to_bytes();
  }
  std::unique_ptr<Tokenizer> load(const TokenizerOptions& opt = {}) const {
    auto b = bytes();
    auto f = GgufFile::parse(b.data(), b.size(), "synth.gguf");
    return Tokenizer::from_gguf(*f, opt);
  }
};

TokenId byte_id(unsigned char b) { return b; }

TEST(ByteLevel, KnownGpt2Alphabet) {
  // The GPT-2 byte map: printable bytes stand for themselves, the rest are U+0100.. in byte order.
  EXPECT_EQ(tok::byte_to_codepoint('A'), 0x41u);
  EXPECT_EQ(tok::byte_to_codepoint(0x00), 0x100u);
  EXPECT_EQ(tok::byte_to_codepoint('\n'), 0x10Au);  // "Ċ"
  EXPECT_EQ(tok::byte_to_codepoint(' '), 0x120u);   // "Ġ"
  EXPECT_EQ(tok::byte_to_codepoint(0x7F), 0x121u);
  EXPECT_EQ(tok::byte_to_codepoint(0xA0), 0x142u);
  EXPECT_EQ(tok::byte_to_codepoint(0xAD), 0x143u);
  EXPECT_EQ(tok::byte_to_codepoint(0xFF), 0xFFu);
  EXPECT_EQ(tok::byte_level_encode(" hi\n"), "\xC4\xA0hi\xC4\x8A");
  for (int b = 0; b < 256; ++b) EXPECT_EQ(tok::codepoint_to_byte(tok::byte_to_codepoint(b)), b);
  EXPECT_FALSE(tok::codepoint_to_byte(0x144).has_value());
  EXPECT_FALSE(tok::byte_level_decode("\xC3").has_value());          // truncated UTF-8
  EXPECT_FALSE(tok::byte_level_decode("\xE2\x82\xAC").has_value());  // "€" is not in the alphabet
}

TEST(Bpe, LowestRankMergesFirstNotLeftToRight) {
  SynthVocab v;
  TokenId bc = v.add("bc"), ab = v.add("ab");
  v.merges = {"b c", "a b"};  // rank 0: b+c, rank 1: a+b
  auto t = v.load();
  EXPECT_EQ(t->encode("abc"), (Ids{byte_id('a'), bc}));  // bc first; then "a"+"bc" is no merge
  EXPECT_EQ(t->encode("ab"), (Ids{ab}));
  (void)ab;
}

TEST(Bpe, EqualRanksMergeLeftmostFirstAndChain) {
  SynthVocab v;
  TokenId aa = v.add("aa"), aaaa = v.add("aaaa");
  v.merges = {"a a", "aa aa"};
  auto t = v.load();
  EXPECT_EQ(t->encode("aaa"), (Ids{aa, byte_id('a')}));
  EXPECT_EQ(t->encode("aaaaa"), (Ids{aaaa, byte_id('a')}));
  EXPECT_EQ(t->encode("aaaaaa"), (Ids{aaaa, aa}));
}

TEST(Bpe, MergesNamingUnknownTokensAreSkipped) {
  SynthVocab v;
  TokenId xy = v.add("xy");
  v.merges = {"x q", "nonsense", "x y"};  // "xq" is not a token; "nonsense" has no space
  auto t = v.load();
  EXPECT_EQ(t->encode("xyxq"), (Ids{xy, byte_id('x'), byte_id('q')}));
}

TEST(Bpe, IgnoreMergesTakesAWholePieceThatIsAToken) {
  SynthVocab v;
  TokenId abc = v.add("abc");
  v.merges = {"a b"};  // no merge path reaches "abc"
  TokenId ab = v.add("ab");
  v.pre = "gpt-2";
  EXPECT_EQ(v.load()->encode("abc"), (Ids{ab, byte_id('c')}));
  v.pre = "llama-bpe";  // llama3 / tiktoken: a piece that is a token is not merged
  EXPECT_EQ(v.load()->encode("abc"), (Ids{abc}));
}

TEST(SpecialTokens, LeftmostLongestControlThenUserDefined) {
  SynthVocab v;
  v.merges = {"a a"};
  v.add("aa");
  TokenId ctl = v.add("<|a|>", TokenType::CONTROL);
  TokenId ctl_long = v.add("<|a|>b", TokenType::CONTROL);
  TokenId user = v.add("u<|", TokenType::USER_DEFINED);
  TokenId user2 = v.add("\u03A9!", TokenType::USER_DEFINED);  // "Ω!"
  auto t = v.load();
  EXPECT_EQ(t->encode("x<|a|>by"), (Ids{byte_id('x'), ctl_long, byte_id('y')}));
  EXPECT_EQ(t->encode("<|a|><|a|>"), (Ids{ctl, ctl}));
  // CONTROL tokens are cut first, so "u<|" cannot take the start of "<|a|>" ...
  EXPECT_EQ(t->encode("u<|a|>"), (Ids{byte_id('u'), ctl}));
  // ... but matches where no CONTROL token overlaps it.
  EXPECT_EQ(t->encode("u<|x"), (Ids{user, byte_id('x')}));
  // USER_DEFINED tokens are matched even when specials are not parsed (llama.cpp and HF agree).
  EncodeOptions plain;
  plain.parse_special = false;
  Ids p = t->encode("<|a|>\u03A9!", plain);
  EXPECT_EQ(p.back(), user2);
  for (TokenId id : p) EXPECT_FALSE(t->is_special(id));
  EXPECT_EQ(t->decode(p), "<|a|>\u03A9!");
  // Decoding: CONTROL as text unless skipped; USER_DEFINED always as text.
  EXPECT_EQ(t->decode(Ids{ctl, user2}), "<|a|>\u03A9!");
  EXPECT_EQ(t->decode(Ids{ctl, user2}, /*skip_special=*/true), "\u03A9!");
}

TEST(SpecialTokens, UnusedSlotsAreNeverMatchedAndDecodeToNothing) {
  SynthVocab v;
  v.merges = {"a a"};
  v.add("aa");
  TokenId pad = v.add("[PAD300]", TokenType::UNUSED);
  auto t = v.load();
  Ids ids = t->encode("[PAD300]");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), pad), 0);
  EXPECT_EQ(t->decode(Ids{pad}), "");
}

TEST(SpecialTokens, BosEosAndEndOfGeneration) {
  SynthVocab v;
  v.merges = {"a a"};
  v.add("aa");
  TokenId bos = v.add("<s>", TokenType::CONTROL), eos = v.add("</s>", TokenType::CONTROL);
  TokenId eot = v.add("<|eot|>", TokenType::CONTROL);
  v.extra_keys = {{"tokenizer.ggml.bos_token_id", GgufValue::u32(bos)},
                  {"tokenizer.ggml.eos_token_id", GgufValue::u32(eos)},
                  {"tokenizer.ggml.eot_token_id", GgufValue::u32(eot)},
                  {"tokenizer.ggml.padding_token_id", GgufValue::u32(99999)},  // out of range: ignored
                  {"tokenizer.ggml.add_bos_token", GgufValue::boolean(true)},
                  {"tokenizer.ggml.add_eos_token", GgufValue::boolean(true)}};
  auto t = v.load();
  EncodeOptions with;
  with.add_special = true;
  EXPECT_EQ(t->encode("a", with), (Ids{bos, byte_id('a'), eos}));
  EXPECT_EQ(t->encode("a"), (Ids{byte_id('a')}));
  EXPECT_EQ(t->vocab().pad, -1);
  EXPECT_TRUE(t->is_eog(eos));
  EXPECT_TRUE(t->is_eog(eot));
  EXPECT_FALSE(t->is_eog(bos));
  v.extra_keys.erase(v.extra_keys.begin());  // add_bos_token without a bos id
  EXPECT_THROW(v.load(), Error);
}

TEST(TokenizerLoad, UnknownPreTokenizerNamesItAndTheOverride) {
  SynthVocab v;
  v.merges = {"a a"};
  v.add("aa");
  v.pre = "no-such-pre";
  try {
    v.load();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("'no-such-pre'"), std::string::npos) << m;
    EXPECT_NE(m.find("--tokenizer-pre"), std::string::npos) << m;
    EXPECT_NE(m.find("deepseek-v3"), std::string::npos) << m;
  }
  TokenizerOptions opt;
  opt.pre_override = "deepseek-v3";
  EXPECT_EQ(v.load(opt)->pre_name(), "deepseek-v3");
  opt.pre_override = "llama3";  // an alias
  EXPECT_EQ(v.load(opt)->pre_name(), "llama-bpe");
  v.pre = "";  // absent: llama.cpp's 'default', with a warning
  EXPECT_EQ(v.load()->pre_name(), "default");
}

TEST(TokenizerLoad, BadMetadataIsAClearError) {
  auto expect_error = [](const SynthVocab& v, const std::string& needle) {
    try {
      v.load();
      ADD_FAILURE() << "expected an error mentioning " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  SynthVocab v;
  v.merges = {"a a"};
  v.add("aa");
  SynthVocab spm = v;
  spm.model = "llama";
  expect_error(spm, "'llama'");
  SynthVocab no_merges = v;
  no_merges.merges.clear();
  expect_error(no_merges, "tokenizer.ggml.merges");
  SynthVocab short_types = v;
  short_types.types.pop_back();
  expect_error(short_types, "tokenizer.ggml.token_type");
  SynthVocab bad_type = v;
  bad_type.types[5] = 9;
  expect_error(bad_type, "token_type[5] = 9");
  SynthVocab dup = v;
  dup.add("a");
  expect_error(dup, "duplicate token text 'a'");
}

TEST(TokenizerLoad, OutOfRangeIdsInDecodeAreErrors) {
  SynthVocab v;
  v.merges = {"a a"};
  v.add("aa");
  auto t = v.load();
  EXPECT_THROW(t->decode(Ids{-1}), Error);
  EXPECT_THROW(t->decode(Ids{static_cast<TokenId>(t->n_tokens())}), Error);
}

std::unique_ptr<Tokenizer> open_vocab(const char* name) {
  std::string p = test::fixture_file(std::string("vocab/") + name);
  if (p.empty()) return nullptr;
  return Tokenizer::open(p);
}

TEST(RealVocab, Gpt2EndOfTextIsMatchedOnlyWhenParsingSpecials) {
  auto t = open_vocab("ggml-vocab-gpt-2.gguf");
  ASSERT_TRUE(t);
  const TokenId eot = 50256;  // <|endoftext|>, tokenizer.ggml.eos_token_id of the file
  ASSERT_EQ(t->vocab().eos, eot);
  EXPECT_EQ(t->encode("<|endoftext|>"), (Ids{eot}));
  EXPECT_EQ(t->encode(" Hello<|endoftext|>"), (Ids{18435, eot}));  // " Hello" = 18435 (test vectors)
  EncodeOptions plain;
  plain.parse_special = false;
  Ids p = t->encode("<|endoftext|>", plain);
  EXPECT_GT(p.size(), 1u);
  EXPECT_EQ(std::count(p.begin(), p.end(), eot), 0);
  EXPECT_EQ(t->decode(p), "<|endoftext|>");
  EXPECT_TRUE(t->is_eog(eot));
  EXPECT_EQ(t->find_token("\xC4\xA0"), 220);  // "Ġ" = the space byte; " " encodes to 220
}

TEST(RealVocab, DeepseekLlmBosIsAddedAndMatched) {
  auto t = open_vocab("ggml-vocab-deepseek-llm.gguf");
  ASSERT_TRUE(t);
  const TokenId bos = 100000;  // <｜begin▁of▁sentence｜>, tokenizer.ggml.bos_token_id
  ASSERT_EQ(t->vocab().bos, bos);
  ASSERT_TRUE(t->add_bos());
  EncodeOptions with;
  with.add_special = true;
  EXPECT_EQ(t->encode("Hello world", with), (Ids{bos, 17464, 1843}));  // ids from the .out vectors
  EXPECT_EQ(t->encode("<\xEF\xBD\x9C"
                      "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>Hello world"),
            (Ids{bos, 17464, 1843}));
}

TEST(RealVocab, InvalidUtf8IsEncodedAsBytesAndRoundTrips) {
  auto t = open_vocab("ggml-vocab-gpt-2.gguf");
  ASSERT_TRUE(t);
  std::mt19937 rng(7);
  for (int iter = 0; iter < 300; ++iter) {
    std::string s(rng() % 40, '\0');
    for (auto& c : s) c = static_cast<char>(rng() % 4 == 0 ? rng() % 256 : "ab \n\xC3\xA9\xF0\x9F"[rng() % 8]);
    Ids ids = t->encode(s);
    EXPECT_EQ(t->decode(ids), s);
  }
  EXPECT_EQ(t->encode("\xFF"), (Ids{t->find_token("\xC3\xBF")}));  // byte 0xFF is "ÿ" in the alphabet
}

TEST(RealVocab, BytesAVocabLacksAreDroppedNotFatal) {
  // DeepSeek-LLM has no tokens for C0, C1, F5..FF (never in valid UTF-8): they are dropped.
  auto t = open_vocab("ggml-vocab-deepseek-llm.gguf");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->decode(t->encode("a\xFF"
                                "b\xC0\xF5"
                                "c")),
            "abc");
  EXPECT_EQ(t->decode(t->encode("a\xE9\x80"
                                "b")),
            "a\xE9\x80"
            "b");  // other invalid bytes survive
}

TEST(RealVocab, ConcurrentEncodesAgreeWithSerialOnes) {
  // Threads share the BPE word cache and keep their own match buffers.
  auto t = open_vocab("ggml-vocab-deepseek-coder.gguf");
  ASSERT_TRUE(t);
  std::string inp = test::read_file(test::fixture_file("vocab/ggml-vocab-deepseek-coder.gguf.inp"));
  std::vector<std::string> texts;
  for (size_t pos = 0, next; pos < inp.size(); pos = next + 1) {
    next = inp.find('\n', pos);
    if (next == std::string::npos) next = inp.size();
    texts.push_back(inp.substr(pos, next - pos) +
                    " <\xEF\xBD\x9C"
                    "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C> 42");
  }
  std::vector<Ids> serial;
  for (const auto& s : texts) serial.push_back(t->encode(s));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int rep = 0; rep < 10; ++rep)
        for (size_t i = 0; i < texts.size(); ++i)
          mismatches[k] += t->encode(texts[(i + k * 7) % texts.size()]) != serial[(i + k * 7) % texts.size()];
    });
  for (auto& th : threads) th.join();
  for (int k = 0; k < 4; ++k) EXPECT_EQ(mismatches[k], 0) << "thread " << k;
}

}  // namespace
}  // namespace mla
