#pragma once
// The vocabulary section of a GGUF file (tokenizer.ggml.*), read once through one key table.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mla {

class GgufFile;
using TokenId = int32_t;

// tokenizer.ggml.token_type values (llama.cpp / gguf-py TokenType).
enum class TokenType : int32_t {
  UNDEFINED = 0,
  NORMAL = 1,        // byte-level BPE text; decodes through the GPT-2 byte map
  UNKNOWN = 2,
  CONTROL = 3,       // special token (BOS, EOS, role markers): text matched only when parsing specials
  USER_DEFINED = 4,  // added token: raw text, always matched before BPE
  UNUSED = 5,        // padding slots ("[PAD123]"): never produced, decode to nothing
  BYTE = 6,
};

// GGUF keys (as gguf-py names them).
namespace gguf_key {
inline constexpr std::string_view kModel = "tokenizer.ggml.model";
inline constexpr std::string_view kPre = "tokenizer.ggml.pre";
inline constexpr std::string_view kTokens = "tokenizer.ggml.tokens";
inline constexpr std::string_view kTokenType = "tokenizer.ggml.token_type";
inline constexpr std::string_view kMerges = "tokenizer.ggml.merges";
inline constexpr std::string_view kBosId = "tokenizer.ggml.bos_token_id";
inline constexpr std::string_view kEosId = "tokenizer.ggml.eos_token_id";
inline constexpr std::string_view kEotId = "tokenizer.ggml.eot_token_id";
inline constexpr std::string_view kEomId = "tokenizer.ggml.eom_token_id";
inline constexpr std::string_view kUnkId = "tokenizer.ggml.unknown_token_id";
inline constexpr std::string_view kSepId = "tokenizer.ggml.seperator_token_id";  // sic, as gguf-py spells it
inline constexpr std::string_view kPadId = "tokenizer.ggml.padding_token_id";
inline constexpr std::string_view kMaskId = "tokenizer.ggml.mask_token_id";
inline constexpr std::string_view kAddBos = "tokenizer.ggml.add_bos_token";
inline constexpr std::string_view kAddEos = "tokenizer.ggml.add_eos_token";
inline constexpr std::string_view kChatTemplate = "tokenizer.chat_template";
}  // namespace gguf_key

struct Vocab {
  std::string model;                // tokenizer.ggml.model ("gpt2")
  std::string pre;                  // tokenizer.ggml.pre as stored ("" when absent)
  std::vector<std::string> texts;   // per id, as stored: byte-level text for NORMAL tokens
  std::vector<TokenType> types;     // per id
  std::vector<std::string> merges;  // "left right" in rank order (byte-level text)
  TokenId bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, sep = -1, pad = -1, mask = -1;
  bool has_add_bos = false, add_bos = false;  // has_*: the key was present
  bool has_add_eos = false, add_eos = false;
  std::string chat_template;        // "" when absent

  size_t size() const { return texts.size(); }

  // Reads and validates the tokenizer keys. Throws mla::Error naming the key: missing tokens,
  // wrong value types, token_type length ≠ token count, unknown token_type values, a duplicate
  // token text. A special id outside the vocab is dropped with a warning (as llama.cpp does).
  static Vocab from_gguf(const GgufFile& f);
};

}  // namespace mla
