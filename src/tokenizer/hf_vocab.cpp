#include "tokenizer/hf_vocab.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "gguf/gguf.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/vocab.h"
#include "util/error.h"
#include "util/log.h"

namespace mla {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

json read_json(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) fail("vocab-from-hf: cannot open '{}'", p.string());
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    fail("vocab-from-hf: {}: invalid JSON: {}", p.string(), e.what());
  }
}

std::optional<std::string> read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void collect_signature(const json& p, std::vector<std::string>& sig, bool* has_byte_level) {
  if (p.is_null()) return;
  const std::string type = p.value("type", "");
  if (type == "Sequence") {
    for (const auto& sub : p.value("pretokenizers", json::array())) collect_signature(sub, sig, has_byte_level);
  } else if (type == "Split") {
    const json& pat = p.value("pattern", json::object());
    const bool isolated = p.value("behavior", "") == "Isolated" && !p.value("invert", false);
    if (pat.contains("Regex") && pat["Regex"].is_string() && isolated)
      sig.push_back("split:" + pat["Regex"].get<std::string>());
    else
      sig.push_back("unsupported:Split" + p.dump());
  } else if (type == "Digits") {
    sig.push_back(p.value("individual_digits", false) ? "digits" : "unsupported:Digits(grouped)");
  } else if (type == "ByteLevel") {
    *has_byte_level = true;
    if (p.value("add_prefix_space", false)) sig.push_back("unsupported:ByteLevel(add_prefix_space)");
    if (p.value("use_regex", true)) sig.push_back("bytelevel-regex");
  } else {
    sig.push_back("unsupported:" + (type.empty() ? p.dump() : type));
  }
}

std::vector<std::string> spec_signature(const tok::PreTokenizerSpec& s) {
  std::vector<std::string> sig;
  for (const auto& st : s.steps) {
    switch (st.kind) {
      case tok::PreStepKind::SPLIT:
        sig.push_back("split:" + st.pattern);
        break;
      case tok::PreStepKind::DIGITS:
        sig.push_back("digits");
        break;
      case tok::PreStepKind::BYTE_LEVEL:
        sig.push_back("bytelevel-regex");
        break;
    }
  }
  return sig;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : " | ") + json(s).dump();
  return out;
}

}  // namespace

std::vector<std::string> hf_pretokenizer_signature(const json& pre_tokenizer, bool* has_byte_level) {
  std::vector<std::string> sig;
  bool bl = false;
  collect_signature(pre_tokenizer, sig, &bl);
  if (has_byte_level) *has_byte_level = bl;
  return sig;
}

std::optional<std::string> detect_pretokenizer(const json& pre_tokenizer) {
  bool has_byte_level = false;
  auto sig = hf_pretokenizer_signature(pre_tokenizer, &has_byte_level);
  if (!has_byte_level) return std::nullopt;
  for (const auto& spec : tok::pretokenizer_specs())
    if (spec.detectable && spec_signature(spec) == sig) return spec.name;
  return std::nullopt;
}

bool token_looks_special(std::string_view t) {
  auto wraps = [&](std::string_view a, std::string_view b) {
    return t.size() >= a.size() + b.size() && t.starts_with(a) && t.ends_with(b);
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wraps("<|", "|>") ||
         wraps("<\uFF5C", "\uFF5C>") || wraps("<unused", ">");
}

namespace {

void add_warning(HfVocabSummary& sum, std::string msg) {
  log().warn("vocab-from-hf: {}", msg);
  sum.warnings.push_back(std::move(msg));
}

// model: byte-level BPE only.
void check_bpe_model(const json& model, const std::string& tjs) {
  if (model.value("type", "") != "BPE")
    fail("vocab-from-hf: {}: model.type is '{}'; only byte-level BPE is supported", tjs, model.value("type", ""));
  if (model.value("byte_fallback", false))
    fail("vocab-from-hf: {}: model.byte_fallback is set (a SentencePiece-style BPE); only byte-level BPE is supported",
         tjs);
  if (!model.contains("vocab") || !model["vocab"].is_object()) fail("vocab-from-hf: {}: model.vocab is missing", tjs);
}

// Pre-tokenizer: --pre, else detected from the regexes. A normalizer is warned about (GGUF has
// no place for it).
std::string choose_pretokenizer(const json& tokenizer, const HfVocabOptions& opt, const std::string& tjs,
                                HfVocabSummary& sum) {
  std::string pre;
  const json pre_json = tokenizer.value("pre_tokenizer", json());
  if (!opt.pre.empty()) {
    if (!tok::find_pretokenizer_spec(opt.pre))
      fail("vocab-from-hf: unknown pre-tokenizer '{}' (known: {})", opt.pre, tok::pretokenizer_names());
    pre = opt.pre;
  } else if (auto d = detect_pretokenizer(pre_json)) {
    pre = *d;
  } else {
    bool bl = false;
    auto sig = hf_pretokenizer_signature(pre_json, &bl);
    fail("vocab-from-hf: {}: pre_tokenizer matches no known pre-tokenizer{} (steps: {}); pass --pre NAME (known: {})",
         tjs, bl ? "" : " and has no ByteLevel step", join(sig), tok::pretokenizer_names());
  }
  const json& norm = tokenizer.value("normalizer", json());
  if (!norm.is_null() && !(norm.value("type", "") == "Sequence" && norm.value("normalizers", json::array()).empty()))
    add_warning(sum, fmt::format("{}: normalizer {} is not representable in GGUF and is ignored (as llama.cpp does)",
                                 tjs, norm.value("type", "?")));
  return pre;
}

// Tokens by id: model vocab, then added tokens (which win where both name an id).
struct HfTokens {
  std::unordered_map<int64_t, std::string> by_id;
  std::unordered_map<int64_t, bool> added_special;  // added token id → its "special" flag
  int64_t max_id = -1;
};

HfTokens collect_tokens(const json& model, const json& added_tokens, const std::string& tjs, HfVocabSummary& sum) {
  HfTokens t;
  for (const auto& [text, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0)
      fail("vocab-from-hf: {}: model.vocab['{}'] is not a non-negative integer id", tjs, text);
    t.by_id[id.get<int64_t>()] = text;
    t.max_id = std::max(t.max_id, id.get<int64_t>());
  }
  for (const auto& a : added_tokens) {
    if (!a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") || !a["content"].is_string())
      fail("vocab-from-hf: {}: an added_tokens entry lacks an integer id or a string content: {}", tjs, a.dump());
    const int64_t id = a["id"].get<int64_t>();
    if (id < 0)
      fail("vocab-from-hf: {}: added token '{}' has negative id {}", tjs, a["content"].get<std::string>(), id);
    t.by_id[id] = a["content"].get<std::string>();
    t.added_special[id] = a.value("special", false);
    t.max_id = std::max(t.max_id, id);
    if (a.value("lstrip", false) || a.value("rstrip", false) || a.value("single_word", false))
      add_warning(sum, fmt::format("added token '{}': lstrip/rstrip/single_word are not representable in GGUF and "
                                   "are ignored",
                                   a["content"].get<std::string>()));
  }
  return t;
}

// config.json's vocab_size pads the vocabulary with UNUSED "[PAD<id>]" slots (llama.cpp does the same).
int64_t vocab_size(const HfTokens& t, const json& config, const std::string& tjs, HfVocabSummary& sum) {
  int64_t n_vocab = t.max_id + 1;
  if (config.contains("vocab_size") && config["vocab_size"].is_number_integer()) {
    int64_t cv = config["vocab_size"].get<int64_t>();
    if (cv < n_vocab)
      add_warning(sum, fmt::format("config.json vocab_size {} is smaller than the tokenizer's {} ids; using {}", cv,
                                   n_vocab, n_vocab));
    else
      n_vocab = cv;
  }
  if (n_vocab > INT32_MAX) fail("vocab-from-hf: {}: {} token ids exceed the int32 range", tjs, n_vocab);
  return n_vocab;
}

// tokenizer.ggml.tokens and token_type: NORMAL for the model's vocabulary, CONTROL or
// USER_DEFINED for added tokens, UNUSED padding.
void token_table(const HfTokens& t, int64_t n_vocab, std::vector<std::string>& tokens, std::vector<int32_t>& types,
                 HfVocabSummary& sum) {
  tokens.assign(static_cast<size_t>(n_vocab), std::string());
  types.assign(static_cast<size_t>(n_vocab), 0);
  for (int64_t i = 0; i < n_vocab; ++i) {
    auto it = t.by_id.find(i);
    if (it == t.by_id.end()) {
      tokens[i] = fmt::format("[PAD{}]", i);
      types[i] = static_cast<int32_t>(TokenType::UNUSED);
      ++sum.n_unused;
      continue;
    }
    tokens[i] = it->second;
    auto ad = t.added_special.find(i);
    if (ad == t.added_special.end()) {
      types[i] = static_cast<int32_t>(TokenType::NORMAL);
    } else if (ad->second || token_looks_special(it->second)) {
      types[i] = static_cast<int32_t>(TokenType::CONTROL);
      ++sum.n_control;
    } else {
      types[i] = static_cast<int32_t>(TokenType::USER_DEFINED);
      ++sum.n_user_defined;
    }
  }
}

// Merges: "a b" strings, or [a, b] pairs (transformers ≥ 4.45) whose spaces gguf-py encodes as U+0120.
std::vector<std::string> read_merges(const json& model, const std::string& tjs) {
  std::vector<std::string> merges;
  auto enc = [](const std::string& s) {
    std::string out;
    for (char c : s) out += c == ' ' ? std::string("\u0120") : std::string(1, c);
    return out;
  };
  for (const auto& m : model.value("merges", json::array())) {
    if (m.is_string())
      merges.push_back(m.get<std::string>());
    else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
      merges.push_back(enc(m[0].get<std::string>()) + " " + enc(m[1].get<std::string>()));
    else
      fail("vocab-from-hf: {}: model.merges entry {} is neither \"a b\" nor [a, b]", tjs, m.dump());
  }
  if (merges.empty()) fail("vocab-from-hf: {}: model.merges is empty", tjs);
  return merges;
}

// The id tokenizer_config.json names for a special token of type typ ("bos", ...), through the
// added tokens, else config.json's <typ>_token_id.
std::optional<int64_t> special_token_id(const char* typ, const json& tcfg, const json& config,
                                        const json& added_tokens) {
  if (tcfg.is_object()) {
    const json& e = tcfg.value(std::string(typ) + "_token", json());
    std::optional<std::string> content;
    if (e.is_string())
      content = e.get<std::string>();
    else if (e.is_object() && e.contains("content") && e["content"].is_string())
      content = e["content"].get<std::string>();
    if (content)
      for (const auto& a : added_tokens)
        if (a["content"] == *content) return a["id"].get<int64_t>();
  }
  if (config.is_object()) {
    const json& e = config.value(std::string(typ) + "_token_id", json());
    if (e.is_number_integer()) return e.get<int64_t>();
  }
  return std::nullopt;
}

// Special tokens and add_*_token from tokenizer_config.json, then ids from config.json for the
// rest (gguf-py SpecialVocab). cls has no GGUF key; gguf-py skips it too.
void write_special_tokens(const json& tcfg, const json& config, const json& added_tokens, int64_t n_vocab,
                          GgufWriter& w, HfVocabSummary& sum) {
  struct Special {
    const char* typ;
    std::string_view key;
  };
  const Special specials[] = {{"bos", gguf_key::kBosId}, {"eos", gguf_key::kEosId}, {"unk", gguf_key::kUnkId},
                              {"sep", gguf_key::kSepId}, {"pad", gguf_key::kPadId}, {"mask", gguf_key::kMaskId}};
  for (const auto& sp : specials) {
    const std::optional<int64_t> id = special_token_id(sp.typ, tcfg, config, added_tokens);
    if (!id) continue;
    if (*id < 0 || *id >= n_vocab) {
      add_warning(sum, fmt::format("{}_token id {} is outside the vocabulary; skipped", sp.typ, *id));
      continue;
    }
    w.set(std::string(sp.key), GgufValue::u32(static_cast<uint32_t>(*id)));
  }
  if (tcfg.is_object()) {
    if (tcfg.contains("add_bos_token") && tcfg["add_bos_token"].is_boolean())
      w.set(std::string(gguf_key::kAddBos), GgufValue::boolean(tcfg["add_bos_token"].get<bool>()));
    if (tcfg.contains("add_eos_token") && tcfg["add_eos_token"].is_boolean())
      w.set(std::string(gguf_key::kAddEos), GgufValue::boolean(tcfg["add_eos_token"].get<bool>()));
  }
}

// Chat template: tokenizer_config.json, else chat_template.json, else chat_template.jinja. A
// list of named templates becomes tokenizer.chat_template (the "default" one),
// tokenizer.chat_template.<name> and tokenizer.chat_templates, as gguf-py writes them.
void write_chat_template(const fs::path& dir, const json& tcfg, GgufWriter& w, HfVocabSummary& sum) {
  json tmpl;
  if (tcfg.is_object() && tcfg.contains("chat_template"))
    tmpl = tcfg["chat_template"];
  else if (fs::exists(dir / "chat_template.json"))
    tmpl = read_json(dir / "chat_template.json").value("chat_template", json());
  else if (auto t = read_text(dir / "chat_template.jinja"))
    tmpl = *t;
  if (tmpl.is_string() && !tmpl.get<std::string>().empty()) {
    w.set(std::string(gguf_key::kChatTemplate), GgufValue::str(tmpl.get<std::string>()));
  } else if (tmpl.is_array()) {
    std::vector<std::string> names;
    for (const auto& c : tmpl) {
      std::string name = c.value("name", "");
      for (auto& ch : name)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      if (name.empty() || !c.contains("template") || !c["template"].is_string()) continue;
      if (name == "default") {
        w.set(std::string(gguf_key::kChatTemplate), GgufValue::str(c["template"].get<std::string>()));
      } else {
        names.push_back(name);
        w.set(std::string(gguf_key::kChatTemplate) + "." + name, GgufValue::str(c["template"].get<std::string>()));
      }
    }
    if (!names.empty()) w.set("tokenizer.chat_templates", GgufValue::strings(names));
  } else if (!tmpl.is_null()) {
    add_warning(sum, "chat_template has an unexpected type; ignored");
  }
}

}  // namespace

HfVocabSummary hf_vocab_to_gguf(const std::string& path, const HfVocabOptions& opt, GgufWriter& w) {
  HfVocabSummary sum;
  fs::path tj = path, dir;
  if (fs::is_directory(tj)) {
    dir = tj;
    tj /= "tokenizer.json";
  } else {
    dir = tj.parent_path();
  }
  const json tokenizer = read_json(tj);
  const std::string tjs = tj.string();
  const json& model = tokenizer.value("model", json::object());
  check_bpe_model(model, tjs);
  sum.pre = choose_pretokenizer(tokenizer, opt, tjs, sum);
  const json added_tokens = tokenizer.value("added_tokens", json::array());
  const HfTokens hf_tokens = collect_tokens(model, added_tokens, tjs, sum);
  json config;
  if (fs::exists(dir / "config.json")) config = read_json(dir / "config.json");
  const int64_t n_vocab = vocab_size(hf_tokens, config, tjs, sum);
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  token_table(hf_tokens, n_vocab, tokens, types, sum);
  const std::vector<std::string> merges = read_merges(model, tjs);

  w.set(std::string(gguf_key::kModel), GgufValue::str("gpt2"));
  w.set(std::string(gguf_key::kPre), GgufValue::str(sum.pre));
  w.set(std::string(gguf_key::kTokens), GgufValue::strings(tokens));
  w.set(std::string(gguf_key::kTokenType), GgufValue::i32s(types));
  w.set(std::string(gguf_key::kMerges), GgufValue::strings(merges));
  sum.n_tokens = tokens.size();
  sum.n_merges = merges.size();

  json tcfg;
  if (fs::exists(dir / "tokenizer_config.json")) tcfg = read_json(dir / "tokenizer_config.json");
  write_special_tokens(tcfg, config, added_tokens, n_vocab, w, sum);
  write_chat_template(dir, tcfg, w, sum);
  return sum;
}

}  // namespace mla
