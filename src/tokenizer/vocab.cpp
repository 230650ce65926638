#include "tokenizer/vocab.h"


#include "gguf/gguf.h"
#include "util/error.h"
#include "util/log.h"

namespace mla {
namespace {

const GgufArray& string_array(const GgufFile& f, std::string_view key) {
  const GgufArray& a = f.get_array(key);
  if (a.elem_type != GgufValueType::STRING)
    fail("tokenizer: {}: expected an array of STRING, got an array of {}", key, gguf_value_type_name(a.elem_type));
  return a;
}

TokenId special_id(const GgufFile& f, std::string_view key, size_t n_tokens) {
  auto v = f.opt_uint(key);
  if (!v) return -1;
  if (*v >= n_tokens) {
    log().warn("tokenizer: {} = {} is outside the vocabulary ({} tokens); ignoring it", key, *v, n_tokens);
    return -1;
  }
  return static_cast<TokenId>(*v);
}

}  // namespace

Vocab Vocab::from_gguf(const GgufFile& f) {
  Vocab v;
  v.model = f.get_string(gguf_key::kModel);
  v.pre = f.opt_string(gguf_key::kPre).value_or("");

  const GgufArray& tokens = string_array(f, gguf_key::kTokens);
  const size_t n = tokens.items.size();
  if (n == 0) fail("tokenizer: {} is empty", gguf_key::kTokens);
  if (n > static_cast<size_t>(INT32_MAX)) fail("tokenizer: {} has {} entries, more than token ids can address", gguf_key::kTokens, n);
  v.texts.reserve(n);
  for (const auto& t : tokens.items) v.texts.push_back(t.as_string());

  v.types.assign(n, TokenType::NORMAL);
  if (f.has(gguf_key::kTokenType)) {
    const GgufArray& types = f.get_array(gguf_key::kTokenType);
    if (types.items.size() != n)
      fail("tokenizer: {} has {} entries, expected one per token ({})", gguf_key::kTokenType, types.items.size(), n);
    for (size_t i = 0; i < n; ++i) {
      int64_t t = types.items[i].as_int();
      if (t < 0 || t > static_cast<int64_t>(TokenType::BYTE))
        fail("tokenizer: {}[{}] = {}: expected a token type 0..6", gguf_key::kTokenType, i, t);
      v.types[i] = static_cast<TokenType>(t);
    }
  }

  if (f.has(gguf_key::kMerges)) {
    const GgufArray& merges = string_array(f, gguf_key::kMerges);
    v.merges.reserve(merges.items.size());
    for (const auto& m : merges.items) v.merges.push_back(m.as_string());
  }

  v.bos = special_id(f, gguf_key::kBosId, n);
  v.eos = special_id(f, gguf_key::kEosId, n);
  v.eot = special_id(f, gguf_key::kEotId, n);
  v.eom = special_id(f, gguf_key::kEomId, n);
  v.unk = special_id(f, gguf_key::kUnkId, n);
  v.sep = special_id(f, gguf_key::kSepId, n);
  v.pad = special_id(f, gguf_key::kPadId, n);
  v.mask = special_id(f, gguf_key::kMaskId, n);
  if (auto b = f.opt_bool(gguf_key::kAddBos)) v.has_add_bos = true, v.add_bos = *b;
  if (auto b = f.opt_bool(gguf_key::kAddEos)) v.has_add_eos = true, v.add_eos = *b;
  v.chat_template = f.opt_string(gguf_key::kChatTemplate).value_or("");
  return v;
}

}  // namespace mla
