#pragma once
// HF tokenizers (tokenizer.json + tokenizer_config.json [+ config.json]) → the GGUF tokenizer
// keys llama.cpp's converter writes (convert_hf_to_gguf.py _set_vocab_gpt2 + gguf-py
// SpecialVocab), for byte-level BPE tokenizers. Used by `mla gguf vocab-from-hf`.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace mla {

class GgufWriter;

struct HfVocabOptions {
  std::string pre;  // tokenizer.ggml.pre to write; "" = detect from tokenizer.json's pre_tokenizer
};

struct HfVocabSummary {
  std::string pre;
  size_t n_tokens = 0, n_merges = 0, n_control = 0, n_user_defined = 0, n_unused = 0;
  std::vector<std::string> warnings;  // also logged
};

// Steps of an HF pre_tokenizer as comparable strings ("split:<regex>", "digits", "bytelevel-regex",
// or "unsupported:..."); sets *has_byte_level when a ByteLevel step is present.
std::vector<std::string> hf_pretokenizer_signature(const nlohmann::json& pre_tokenizer, bool* has_byte_level);
// The first detectable known pre-tokenizer with the same steps, or nullopt.
std::optional<std::string> detect_pretokenizer(const nlohmann::json& pre_tokenizer);
// llama.cpp's converter marks these added tokens CONTROL even when tokenizer.json does not
// flag them special ("<|...|>", "<｜...｜>", "<pad>", "<mask>", "<2mass>", "[@BOS@]", "<unused...>").
bool token_looks_special(std::string_view text);

// path: a directory holding tokenizer.json, or the tokenizer.json file itself (its directory is
// searched for tokenizer_config.json, chat_template.json/.jinja and config.json).
// Throws mla::Error naming the file and field for anything it cannot convert.
HfVocabSummary hf_vocab_to_gguf(const std::string& path, const HfVocabOptions& opt, GgufWriter& w);

}  // namespace mla
