#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "util/error.h"

namespace mla::tok {
namespace {

// Patterns as they appear in the models' tokenizer.json files (HF tokenizers, Oniguruma syntax).
// Non-ASCII characters are written as \u escapes so the source cannot be altered by Unicode
// normalization (several class members, e.g. U+2126 OHM SIGN, have canonical equivalents).

// ByteLevel(use_regex=true): GPT-2's pattern.
constexpr const char* kGpt2Re = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// Llama 3 (tiktoken cl100k): case-insensitive contractions, numbers in runs of up to 3.
constexpr const char* kLlama3Re =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// Qwen2: as Llama 3 but every digit alone.
constexpr const char* kQwen2Re =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// DeepSeek-LLM / DeepSeek-V2: cased letters of many scripts, ASCII and full-width punctuation, CJK.
constexpr const char* kDeepseekLlmLetters =
    "\\s?[A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293\u0295-\u02AF"
    "\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C\u038E-\u03A1\u03A3-\u03F5"
    "\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5\u13A0-\u13F5\u13F8-\u13FD\u1C90-\u1CBA"
    "\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77\u1D79-\u1D9A\u1E00-\u1F15\u1F18-\u1F1D\u1F20-\u1F45"
    "\u1F48-\u1F4D\u1F50-\u1F57\u1F59\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4\u1FB6-\u1FBC\u1FBE"
    "\u1FC2-\u1FC4\u1FC6-\u1FCC\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC"
    "\u2102\u2107\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D\u212F-\u2134\u2139"
    "\u213C-\u213F\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE\u2CF2\u2CF3"
    "\uA640-\uA66D\uA680-\uA69B\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E\uAB70-\uABBF\uFB00-\uFB06"
    "\uFB13-\uFB17\uFF21-\uFF3A\uFF41-\uFF5A\U00010400-\U0001044F\U000104B0-\U000104D3"
    "\U000104D8-\U000104FB\U00010C80-\U00010CB2\U00010CC0-\U00010CF2\U000118A0-\U000118DF"
    "\U0001E900-\U0001E943]+";
constexpr const char* kDeepseekLlmPunct = "\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+";
constexpr const char* kDeepseekCjk = "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+";

// DeepSeek-V3 (literal CR/LF characters inside the classes, as in its tokenizer.json).
constexpr const char* kDeepseekV3Cjk = "[\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF]+";
constexpr const char* kDeepseekV3Main =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";

// Kimi-K2 (tiktoken, Rust regex syntax with class intersection `&&`).
constexpr const char* kKimiRe =
    "[\\p{Han}]+|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]"
    "+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]"
    "*"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// The same with `[X&&[^\p{Han}]]` spelled as a lookahead per character (PCRE2 10.42 has no
// class intersection).
constexpr const char* kKimiPcre2 =
    "\\p{Han}+|"
    "[^\\r\\n\\p{L}\\p{N}]?(?:(?!\\p{Han})[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])*(?:(?!\\p{Han})[\\p{Ll}\\p{Lm}\\p{Lo}"
    "\\p{M}])+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "[^\\r\\n\\p{L}\\p{N}]?(?:(?!\\p{Han})[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])+(?:(?!\\p{Han})[\\p{Ll}\\p{Lm}\\p{Lo}"
    "\\p{M}])*"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

PreStep split(const char* pattern, const char* pcre2 = "") { return {PreStepKind::SPLIT, pattern, pcre2}; }
PreStep digits() { return {PreStepKind::DIGITS, {}, {}}; }
PreStep byte_level() { return {PreStepKind::BYTE_LEVEL, {}, {}}; }

std::vector<PreTokenizerSpec> make_specs() {
  std::vector<PreTokenizerSpec> s;
  s.push_back({"deepseek-v3", {}, {split("\\p{N}{1,3}"), split(kDeepseekV3Cjk), split(kDeepseekV3Main)}});
  s.push_back({"deepseek-llm",
               {},
               {split("[\r\n]"), split(kDeepseekLlmLetters), split(kDeepseekLlmPunct), split("\\s+$"),
                split(kDeepseekCjk), digits()}});
  s.push_back({"deepseek-coder",
               {},
               {split("[\r\n]"), split("\\s?\\p{L}+"), split("\\s?\\p{P}+"), split(kDeepseekCjk), digits()}});
  // llama-bpe and glm4 share one pattern; auto-detection picks llama-bpe (see glm4 below).
  s.push_back({"llama-bpe", {"llama3", "llama-v3"}, {split(kLlama3Re)}, /*ignore_merges=*/true, /*add_bos=*/true});
  s.push_back({"qwen2", {"deepseek-r1-qwen"}, {split(kQwen2Re)}});
  s.push_back({"gpt-2", {}, {byte_level()}});
  s.push_back({"smollm", {}, {digits(), byte_level()}});
  // tiktoken looks a whole piece up before merging, hence ignore_merges.
  s.push_back({"kimi-k2", {}, {split(kKimiRe, kKimiPcre2)}, /*ignore_merges=*/true});
  s.push_back({"glm4", {"chatglm-bpe"}, {split(kLlama3Re)}, false, false, /*detectable=*/false});
  // llama.cpp's fallback for files without tokenizer.ggml.pre; no HF model uses it.
  s.push_back({"default",
               {},
               {split("[\\p{P}\\$\\+<=>\\^~\\|]+"),
                split("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"),
                split("\\p{N}+"), split("[0-9][0-9][0-9]")},
               false,
               false,
               /*detectable=*/false});
  return s;
}

// Per-thread PCRE2 buffers: match data (the first ovector pair is all we read) and a JIT stack
// that may grow to 64 MiB (reserved, committed on use) so long pieces need not fall back to
// the interpreter.
struct MatchScratch {
  pcre2_match_data* md = nullptr;
  pcre2_match_context* mctx = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  std::vector<std::string_view> a, b;

  MatchScratch() {
    md = pcre2_match_data_create(4, nullptr);
    mctx = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
    if (mctx && jit_stack) pcre2_jit_stack_assign(mctx, nullptr, jit_stack);
  }
  ~MatchScratch() {
    pcre2_match_data_free(md);
    pcre2_match_context_free(mctx);
    pcre2_jit_stack_free(jit_stack);
  }
};

MatchScratch& scratch() {
  thread_local MatchScratch s;
  if (!s.md || !s.mctx) fail("tokenizer: out of memory allocating PCRE2 match data");
  return s;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

// Length of the character starting at p (at least 1, so the scan always advances).
size_t char_len(const unsigned char* p, size_t n) {
  unsigned char c = p[0];
  size_t len = c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  return len <= n ? len : 1;
}

}  // namespace

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Regex() { pcre2_code_free(code); }
};

const std::vector<PreTokenizerSpec>& pretokenizer_specs() {
  static const std::vector<PreTokenizerSpec> specs = make_specs();
  return specs;
}

const PreTokenizerSpec* find_pretokenizer_spec(std::string_view name) {
  for (const auto& s : pretokenizer_specs()) {
    if (s.name == name) return &s;
    for (const auto& a : s.aliases)
      if (a == name) return &s;
  }
  return nullptr;
}

std::string pretokenizer_names() {
  std::string out;
  for (const auto& s : pretokenizer_specs()) {
    if (!out.empty()) out += ", ";
    out += s.name;
    for (const auto& a : s.aliases) out += ", " + a;
  }
  return out;
}

std::string hf_regex_to_pcre2(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c != '\\' || i + 1 == pattern.size()) {
      out.push_back(c);
      continue;
    }
    char e = pattern[++i];
    if (e == 's') {
      out += "\\p{White_Space}";
    } else if (e == 'S') {
      out += "\\P{White_Space}";
    } else if ((e == 'p' || e == 'P') && i + 1 < pattern.size() && pattern[i + 1] == '{') {
      // A bare script name means Script in Oniguruma and Rust regex but Script_Extensions in
      // PCRE2 (where \p{Han} would also take U+3001 "、"): spell it \p{sc:Name}. Names of one
      // or two letters are general categories.
      size_t close = pattern.find('}', i + 2);
      std::string_view name = pattern.substr(i + 2, close == std::string_view::npos ? 0 : close - i - 2);
      out.push_back('\\');
      out.push_back(e);
      if (name.size() > 2 && name != "Any" && name != "White_Space" &&
          name.find_first_of(":=&") == std::string_view::npos) {
        out += "{sc:";
        out += name;
        out += '}';
        i = close;
      }
    } else {
      out.push_back('\\');
      out.push_back(e);
    }
  }
  return out;
}

std::unique_ptr<PreTokenizer> PreTokenizer::create(std::string_view name) {
  const PreTokenizerSpec* spec = find_pretokenizer_spec(name);
  if (!spec) fail("tokenizer: unknown pre-tokenizer '{}' (known: {})", name, pretokenizer_names());
  return std::make_unique<PreTokenizer>(*spec);
}

PreTokenizer::PreTokenizer(const PreTokenizerSpec& spec) : spec_(spec) {
  if (spec_.steps.empty()) fail("tokenizer: pre-tokenizer '{}' has no steps", spec_.name);
  std::unique_ptr<pcre2_compile_context, void (*)(pcre2_compile_context*)> ctx(pcre2_compile_context_create(nullptr),
                                                                               pcre2_compile_context_free);
  pcre2_compile_context* cctx = ctx.get();
  if (!cctx) fail("tokenizer: out of memory creating a PCRE2 compile context");
  // Oniguruma (Ruby syntax) treats only LF as a newline and `^`/`$` as line anchors.
  pcre2_set_newline(cctx, PCRE2_NEWLINE_LF);
  for (size_t k = 0; k < spec_.steps.size(); ++k) {
    const PreStep& step = spec_.steps[k];
    std::string hf = step.kind == PreStepKind::SPLIT    ? step.pattern
                     : step.kind == PreStepKind::DIGITS ? std::string("\\p{N}")
                                                        : std::string(kGpt2Re);
    std::string pat = hf_regex_to_pcre2(step.pcre2.empty() ? hf : step.pcre2);
    int err = 0;
    PCRE2_SIZE err_off = 0;
    auto re = std::make_unique<Regex>();
    re->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(),
                             PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_MULTILINE, &err, &err_off, cctx);
    if (!re->code) {
      fail("tokenizer: pre-tokenizer '{}' step {}: PCRE2 rejects the pattern at offset {}: {}", spec_.name, k, err_off,
           pcre2_message(err));
    }
    re->jit = pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0;
    regexes_.push_back(std::move(re));
  }
}

PreTokenizer::~PreTokenizer() = default;

namespace {

// Splits piece with HF "Isolated" semantics, appending the pieces to out.
void split_isolated(const PreTokenizer::Regex& re, std::string_view piece, MatchScratch& s,
                    std::vector<std::string_view>& out) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
  const size_t len = piece.size();
  size_t pos = 0, last = 0;
  while (pos < len) {
    int rc = re.jit ? pcre2_jit_match(re.code, subject, len, pos, 0, s.md, s.mctx) : PCRE2_ERROR_JIT_STACKLIMIT;
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // JIT unavailable or out of stack: use the interpreter
      rc = pcre2_match(re.code, subject, len, pos, PCRE2_NO_JIT, s.md, s.mctx);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0)
      fail("tokenizer: pre-tokenizer regex failed on a piece of {} bytes at byte {}: {}", len, pos, pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.md);
    size_t mb = ov[0], me = ov[1];
    if (me == mb) {  // an empty match (none of the known patterns has one): step over a character
      pos = mb + char_len(subject + mb, len - mb);
      continue;
    }
    if (mb > last) out.push_back(piece.substr(last, mb - last));
    out.push_back(piece.substr(mb, me - mb));
    last = pos = me;
  }
  if (last < len) out.push_back(piece.substr(last));
}

}  // namespace

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
  if (text.empty()) return;
  MatchScratch& s = scratch();
  s.a.clear();
  s.a.push_back(text);
  for (size_t k = 0; k < regexes_.size(); ++k) {
    const bool last_step = k + 1 == regexes_.size();
    std::vector<std::string_view>& dst = last_step ? out : s.b;
    if (!last_step) s.b.clear();
    for (std::string_view piece : s.a) split_isolated(*regexes_[k], piece, s, dst);
    if (!last_step) std::swap(s.a, s.b);
  }
}

}  // namespace mla::tok
