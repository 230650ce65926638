// libFuzzer: arbitrary bytes through every pre-tokenizer and a small byte-level BPE vocab with
// CONTROL and USER_DEFINED tokens. Checks: no crash/UB, decode(encode(x)) == x (all 256 byte
// tokens exist), the streaming detokenizer's deltas add up to decode_text.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace {

std::unique_ptr<mla::Tokenizer> make_tokenizer(const std::string& pre) {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(mla::tok::byte_level_encode(std::string(1, static_cast<char>(b))));
    types.push_back(1);
  }
  for (const char* t : {"\xC4\xA0t", "he", "in", "\xC4\xA0the", "th"}) tokens.push_back(t), types.push_back(1);
  tokens.push_back("<|end|>"), types.push_back(3);
  tokens.push_back("<|end|>x"), types.push_back(3);
  tokens.push_back("\xCE\xA9!"), types.push_back(4);
  mla::GgufWriter w;
  w.set("tokenizer.ggml.model", mla::GgufValue::str("gpt2"));
  w.set("tokenizer.ggml.pre", mla::GgufValue::str(pre));
  w.set("tokenizer.ggml.tokens", mla::GgufValue::strings(tokens));
  w.set("tokenizer.ggml.token_type", mla::GgufValue::i32s(types));
  w.set("tokenizer.ggml.merges", mla::GgufValue::strings({"\xC4\xA0 t", "h e", "i n", "t h", "\xC4\xA0t he"}));
  auto bytes = w.to_bytes();
  auto f = mla::GgufFile::parse(bytes.data(), bytes.size(), "fuzz");
  return mla::Tokenizer::from_gguf(*f);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::vector<std::unique_ptr<mla::Tokenizer>> toks = [] {
    std::vector<std::unique_ptr<mla::Tokenizer>> v;
    for (const auto& s : mla::tok::pretokenizer_specs()) v.push_back(make_tokenizer(s.name));
    return v;
  }();
  if (size == 0) return 0;
  const auto& tok = *toks[data[0] % toks.size()];
  std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  mla::EncodeOptions eo;
  eo.parse_special = data[0] & 0x80;
  std::vector<mla::TokenId> ids = tok.encode(text, eo);
  if (tok.decode(ids) != text) std::abort();
  mla::StreamDetokenizer d(tok);
  std::string streamed;
  for (mla::TokenId id : ids) streamed += d.feed(id);
  streamed += d.finish();
  if (streamed != tok.decode_text(ids)) std::abort();
  return 0;
}
