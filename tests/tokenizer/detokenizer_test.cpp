// UTF-8 sanitizing (expected strings from Python's bytes.decode("utf-8", errors="replace")) and
// the streaming detokenizer's contract: deltas are valid UTF-8 and add up to decode_text(ids).
#include "tokenizer/detokenizer.h"

#include <gtest/gtest.h>

#include <random>

#include "test_data.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace mla {
namespace {

const std::string R = "\xEF\xBF\xBD";  // U+FFFD

TEST(Utf8, SanitizeReplacesMaximalSubpartsLikePython) {
  struct Case {
    std::string in, out;
  };
  const Case cases[] = {
      {"abc", "abc"},
      {"\xFF", R},
      {"\xC3", R},
      {"\xC3\xA9", "\xC3\xA9"},
      {"\xE0\x80", R + R},  // E0 needs A0..BF next
      {"\xE0\xA0", R},      // a truncated 3-byte sequence is one subpart
      {"\xE0\xA0\x80", "\xE0\xA0\x80"},
      {"\xED\xA0\x80", R + R + R},  // surrogates are invalid
      {"\xF0\x9F\x98", R},
      {"\xF0\x9F\x98\x80", "\xF0\x9F\x98\x80"},
      {"\xF4\x90\x80\x80", R + R + R + R},  // above U+10FFFF
      {"\xC0\xAF", R + R},                  // overlong
      {"a\x80"
       "b",
       "a" + R + "b"},
      {"\xF0\x9F\x98"
       "a",
       R + "a"},
      {"\xF8\x88\x80\x80\x80", R + R + R + R + R},
      {"\xC3\xC3\xA9", R + "\xC3\xA9"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(tok::utf8_sanitize(c.in), c.out) << testing::PrintToString(c.in);
    EXPECT_EQ(tok::utf8_is_valid(c.in), c.in == c.out) << testing::PrintToString(c.in);
  }
}

TEST(Utf8, IncompleteTailIsHeldBackUnlessFinal) {
  std::string out;
  EXPECT_EQ(tok::utf8_sanitize_append("ab\xF0\x9F", false, out), 2u);
  EXPECT_EQ(out, "ab");
  EXPECT_EQ(tok::utf8_sanitize_append("\xF0\x9F", true, out), 2u);
  EXPECT_EQ(out, "ab" + R);
}

// Loaded once for the whole file (~0.1 s per load).
const Tokenizer* gpt2() {
  static std::unique_ptr<Tokenizer> t = [] {
    std::string p = test::fixture_file("vocab/ggml-vocab-gpt-2.gguf");
    return p.empty() ? nullptr : Tokenizer::open(p);
  }();
  return t.get();
}

TEST(StreamDetokenizer, EmojiSplitOverThreeTokensComesOutWhole) {
  auto t = gpt2();
  ASSERT_TRUE(t);
  // " 🦙" in GPT-2 (llama.cpp's test vectors): 12520 = " \xF0\x9F", 99 = "\xA6", 247 = "\x99".
  StreamDetokenizer d(*t);
  EXPECT_EQ(d.feed(12520), " ");
  EXPECT_EQ(d.pending_bytes(), 2u);
  EXPECT_EQ(d.feed(99), "");
  EXPECT_EQ(d.feed(247), "\xF0\x9F\xA6\x99");
  EXPECT_EQ(d.finish(), "");
}

TEST(StreamDetokenizer, IncompleteTailBecomesOneReplacementAtFinish) {
  auto t = gpt2();
  ASSERT_TRUE(t);
  StreamDetokenizer d(*t);
  EXPECT_EQ(d.feed(12520), " ");
  EXPECT_EQ(d.finish(), R);
  EXPECT_EQ(d.feed(12520), " ");    // reusable after finish
  EXPECT_EQ(d.feed(220), R + " ");  // "\xF0\x9F" then a space: the prefix is invalid now
}

TEST(StreamDetokenizer, SkipSpecialLeavesControlTokensOut) {
  auto t = gpt2();
  ASSERT_TRUE(t);
  StreamDetokenizer keep(*t), skip(*t, /*skip_special=*/true);
  EXPECT_EQ(keep.feed(50256), "<|endoftext|>");
  EXPECT_EQ(skip.feed(50256), "");
  EXPECT_THROW(keep.feed(50257), Error);
}

TEST(StreamDetokenizer, DeltasAreValidAndAddUpToTheFullDecode) {
  auto t = gpt2();
  ASSERT_TRUE(t);
  // Byte-level single-byte tokens (ids < 256 in GPT-2 are the 256 bytes) split characters at
  // random places; mixing in ordinary ids and <|endoftext|> covers the rest.
  std::mt19937 rng(11);
  for (int iter = 0; iter < 500; ++iter) {
    std::vector<TokenId> ids(rng() % 30);
    for (auto& id : ids) id = rng() % 3 ? static_cast<TokenId>(rng() % 256) : static_cast<TokenId>(rng() % 50257);
    StreamDetokenizer d(*t);
    std::string all;
    for (TokenId id : ids) {
      std::string delta = d.feed(id);
      EXPECT_TRUE(tok::utf8_is_valid(delta));
      EXPECT_LE(d.pending_bytes(), 3u);
      all += delta;
    }
    all += d.finish();
    EXPECT_EQ(all, t->decode_text(ids));
    EXPECT_EQ(all, tok::utf8_sanitize(t->decode(ids)));
  }
}

TEST(StreamDetokenizer, RoundTripsEncodedText) {
  auto t = gpt2();
  ASSERT_TRUE(t);
  const std::string text = "Hello 🦙 wörld — 你好，世界 😶‍🌫️ ✅\n\tend";
  StreamDetokenizer d(*t);
  std::string all;
  for (TokenId id : t->encode(text)) all += d.feed(id);
  all += d.finish();
  EXPECT_EQ(all, text);
}

}  // namespace
}  // namespace mla
