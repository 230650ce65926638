#include "tokenizer/tokenizer.h"

#include <array>
#include <mutex>
#include <unordered_map>

#include "gguf/gguf.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/token_trie.h"
#include "tokenizer/utf8.h"
#include "util/error.h"
#include "util/log.h"

namespace mla {
namespace {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringMap = std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>>;

// BPE results per piece. Sharded so that threads encoding at once rarely meet on one lock; a
// full shard stops caching (as HF's BPE cache does) rather than evicting.
class WordCache {
 public:
  static constexpr size_t kShards = 16;
  static constexpr size_t kMaxEntriesPerShard = 8192;
  static constexpr size_t kMaxPieceBytes = 64;

  bool get(std::string_view piece, size_t hash, std::vector<TokenId>& out) {
    Shard& s = shards_[hash % kShards];
    std::lock_guard lock(s.mu);
    auto it = s.map.find(piece);
    if (it == s.map.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }
  void put(std::string_view piece, size_t hash, const TokenId* ids, size_t n) {
    Shard& s = shards_[hash % kShards];
    std::lock_guard lock(s.mu);
    if (s.map.size() >= kMaxEntriesPerShard) return;
    s.map.emplace(std::string(piece), std::vector<TokenId>(ids, ids + n));
  }

 private:
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<TokenId>, StringHash, std::equal_to<>> map;
  };
  std::array<Shard, kShards> shards_;
};

// Per-thread encode buffers.
struct EncodeScratch {
  std::vector<std::string_view> pieces;
  std::vector<TokenId> byte_ids;
  tok::BpeScratch bpe;
};

EncodeScratch& encode_scratch() {
  thread_local EncodeScratch s;
  return s;
}

// Token texts llama.cpp also treats as end-of-generation when no eot key names one.
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "[EOT]",
};

}  // namespace

struct Tokenizer::Impl {
  StringMap text_to_id;                // stored text → id
  StringMap normal_bytes_to_id;        // NORMAL tokens by the bytes they stand for (ignore_merges)
  std::array<TokenId, 256> byte_id{};  // token of each single byte, -1 when the vocab lacks it
  tok::MergeTable merges;
  std::vector<std::string> bytes;  // per id: what token_bytes returns with render_special
  std::vector<uint8_t> special;    // per id: CONTROL or UNKNOWN
  std::vector<TokenId> eog;
  tok::TokenTrie control_trie, user_trie;
  bool ignore_merges = false;
  WordCache cache;

  // The building steps of from_gguf (path names the file in messages).
  void index_tokens(const Vocab& v, const std::string& path);
  void check_byte_tokens(const std::string& path) const;
  void build_merges(const Vocab& v, const std::string& path);
  void find_end_of_generation(const Vocab& v);
};

// Per token: its text's id, the bytes it stands for, whether it is special, the tries of
// CONTROL and USER_DEFINED texts, the single-byte tokens.
void Tokenizer::Impl::index_tokens(const Vocab& v, const std::string& path) {
  const size_t n = v.size();
  text_to_id.reserve(n);
  bytes.resize(n);
  special.assign(n, 0);
  byte_id.fill(-1);
  for (size_t i = 0; i < n; ++i) {
    const auto id = static_cast<TokenId>(i);
    const std::string& text = v.texts[i];
    if (!text.empty() && !text_to_id.emplace(text, id).second)
      fail("tokenizer: {}: duplicate token text '{}' at ids {} and {}", path, text, text_to_id[text], id);
    switch (v.types[i]) {
      case TokenType::NORMAL: {
        // A NORMAL token holds byte-level text; one that does not decode is taken verbatim
        // (HF's ByteLevel decoder does the same).
        auto raw = tok::byte_level_decode(text);
        if (raw)
          bytes[i] = std::move(*raw);
        else
          bytes[i] = text;
        if (raw && bytes[i].size() == 1) {
          auto b = static_cast<unsigned char>(bytes[i][0]);
          if (byte_id[b] < 0) byte_id[b] = id;
        }
        if (ignore_merges) normal_bytes_to_id.emplace(bytes[i], id);
        break;
      }
      case TokenType::CONTROL:
      case TokenType::UNKNOWN:
        bytes[i] = text;
        special[i] = 1;
        control_trie.insert(text, id);
        break;
      case TokenType::USER_DEFINED:
        bytes[i] = text;
        user_trie.insert(text, id);
        break;
      default:  // UNUSED, BYTE, UNDEFINED: never produced by encode, decode to nothing
        break;
    }
  }
}

// Bytes without a token are dropped when encoding (HF's BPE drops unknown symbols when there is
// no unk token). Vocabularies trained on valid UTF-8 often lack C0, C1 and F5..FF, which never
// occur in it; any other gap is worth a warning.
void Tokenizer::Impl::check_byte_tokens(const std::string& path) const {
  size_t n_missing = 0, n_missing_valid = 0;
  for (int b = 0; b < 256; ++b) {
    if (byte_id[b] >= 0) continue;
    ++n_missing;
    n_missing_valid += !(b == 0xC0 || b == 0xC1 || b >= 0xF5);
  }
  if (n_missing_valid)
    log().warn("tokenizer: {}: {} of 256 single-byte tokens are missing; such bytes are dropped when encoding", path,
               n_missing);
  else if (n_missing)
    log().debug("tokenizer: {}: no tokens for {} bytes that never occur in valid UTF-8", path, n_missing);
}

// Merges "left right" → (rank, merged id). Entries naming unknown tokens are skipped.
void Tokenizer::Impl::build_merges(const Vocab& v, const std::string& path) {
  if (v.merges.empty())
    fail("tokenizer: {}: {} is missing or empty; byte-level BPE needs merges", path, gguf_key::kMerges);
  merges.reserve(v.merges.size());
  size_t n_bad = 0;
  std::string joined;
  for (size_t r = 0; r < v.merges.size(); ++r) {
    const std::string& m = v.merges[r];
    size_t sp = m.find(' ', 1);
    if (sp == std::string::npos) {
      ++n_bad;
      continue;
    }
    std::string_view left(m.data(), sp), right(m.data() + sp + 1, m.size() - sp - 1);
    joined.assign(left);
    joined.append(right);
    auto l = text_to_id.find(left), rr = text_to_id.find(right), j = text_to_id.find(joined);
    if (l == text_to_id.end() || rr == text_to_id.end() || j == text_to_id.end()) {
      ++n_bad;
      continue;
    }
    merges.insert(l->second, rr->second, static_cast<int32_t>(r), j->second);
  }
  if (n_bad)
    log().warn("tokenizer: {}: skipped {} of {} merges that name tokens not in the vocabulary", path, n_bad,
               v.merges.size());
}

void Tokenizer::Impl::find_end_of_generation(const Vocab& v) {
  for (TokenId id : {v.eos, v.eot, v.eom})
    if (id >= 0) eog.push_back(id);
  if (v.eot < 0)
    for (std::string_view s : kEogTexts)
      if (auto it = text_to_id.find(s); it != text_to_id.end() && special[it->second]) eog.push_back(it->second);
}

Tokenizer::Tokenizer() : impl_(std::make_unique<Impl>()) {}
Tokenizer::~Tokenizer() = default;

const std::string& Tokenizer::pre_name() const { return pre_->spec().name; }

std::unique_ptr<Tokenizer> Tokenizer::open(const std::string& path, const TokenizerOptions& opt) {
  auto f = GgufFile::open(path);
  return from_gguf(*f, opt);
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& f, const TokenizerOptions& opt) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->vocab_ = Vocab::from_gguf(f);
  Vocab& v = t->vocab_;
  Impl& im = *t->impl_;
  if (v.model != "gpt2")
    fail("tokenizer: {}: tokenizer.ggml.model = '{}'; only byte-level BPE ('gpt2') is supported", f.path(), v.model);

  // Pre-tokenizer: the override, else the file's key, else llama.cpp's fallback.
  std::string pre = !opt.pre_override.empty() ? opt.pre_override : v.pre;
  if (pre.empty()) {
    log().warn("tokenizer: {} has no tokenizer.ggml.pre; using 'default' (pass --tokenizer-pre NAME to choose)",
               f.path());
    pre = "default";
  }
  const tok::PreTokenizerSpec* spec = tok::find_pretokenizer_spec(pre);
  if (!spec)
    fail(
        "tokenizer: {}: unknown pre-tokenizer '{}' (tokenizer.ggml.pre); known: {}; override with --tokenizer-pre NAME",
        f.path(), pre, tok::pretokenizer_names());
  t->pre_ = std::make_unique<tok::PreTokenizer>(*spec);
  im.ignore_merges = spec->ignore_merges;
  t->add_bos_ = v.has_add_bos ? v.add_bos : spec->add_bos && v.bos >= 0;  // a default needs a bos id
  t->add_eos_ = v.has_add_eos && v.add_eos;
  if (t->add_bos_ && v.bos < 0)
    fail("tokenizer: {}: add_bos_token is true but {} is not set", f.path(), gguf_key::kBosId);
  if (t->add_eos_ && v.eos < 0)
    fail("tokenizer: {}: add_eos_token is true but {} is not set", f.path(), gguf_key::kEosId);

  im.index_tokens(v, f.path());
  im.check_byte_tokens(f.path());
  im.build_merges(v, f.path());
  v.merges.clear();
  v.merges.shrink_to_fit();
  im.find_end_of_generation(v);
  return t;
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, const EncodeOptions& opt) const {
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 4);
  encode_append(text, opt, out);
  return out;
}

void Tokenizer::encode_append(std::string_view text, const EncodeOptions& opt, std::vector<TokenId>& out) const {
  if (opt.add_special && add_bos_) out.push_back(vocab_.bos);
  encode_text(text, opt.parse_special, out);
  if (opt.add_special && add_eos_) out.push_back(vocab_.eos);
}

// CONTROL tokens first (when parsing them), then USER_DEFINED ones in the text between: the
// order of HF's AddedVocabulary (non-normalized special tokens, then normalized added tokens).
void Tokenizer::encode_text(std::string_view text, bool parse_special, std::vector<TokenId>& out) const {
  const Impl& im = *impl_;
  auto encode_with_user_tokens = [&](std::string_view span) {
    size_t pos = 0;
    while (pos < span.size()) {
      auto m = im.user_trie.find(span, pos);
      if (m.len == 0) break;
      encode_plain(span.substr(pos, m.pos - pos), out);
      out.push_back(m.id);
      pos = m.pos + m.len;
    }
    encode_plain(span.substr(pos), out);
  };
  if (!parse_special || im.control_trie.empty()) {
    encode_with_user_tokens(text);
    return;
  }
  size_t pos = 0;
  while (pos < text.size()) {
    auto m = im.control_trie.find(text, pos);
    if (m.len == 0) break;
    encode_with_user_tokens(text.substr(pos, m.pos - pos));
    out.push_back(m.id);
    pos = m.pos + m.len;
  }
  encode_with_user_tokens(text.substr(pos));
}

void Tokenizer::encode_plain(std::string_view text, std::vector<TokenId>& out) const {
  if (text.empty()) return;
  Impl& im = *impl_;
  EncodeScratch& s = encode_scratch();
  s.pieces.clear();
  pre_->split(text, s.pieces);
  for (std::string_view piece : s.pieces) {
    if (im.ignore_merges) {
      auto it = im.normal_bytes_to_id.find(piece);
      if (it != im.normal_bytes_to_id.end()) {
        out.push_back(it->second);
        continue;
      }
    }
    const bool cacheable = piece.size() <= WordCache::kMaxPieceBytes;
    const size_t hash = cacheable ? StringHash{}(piece) : 0;
    if (cacheable && im.cache.get(piece, hash, out)) continue;
    s.byte_ids.clear();
    for (unsigned char b : piece)
      if (im.byte_id[b] >= 0) s.byte_ids.push_back(im.byte_id[b]);
    if (s.byte_ids.empty()) continue;
    const size_t start = out.size();
    tok::bpe_merge(im.merges, s.byte_ids.data(), s.byte_ids.size(), s.bpe, out);
    if (cacheable) im.cache.put(piece, hash, out.data() + start, out.size() - start);
  }
}

std::string_view Tokenizer::token_bytes(TokenId id, bool render_special) const {
  if (!render_special && impl_->special[id]) return {};
  return impl_->bytes[id];
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool skip_special) const {
  std::string out;
  for (TokenId id : ids) {
    if (!is_valid(id)) fail("tokenizer: token id {} is out of range [0, {})", id, vocab_.size());
    out += token_bytes(id, !skip_special);
  }
  return out;
}

std::string Tokenizer::decode_text(std::span<const TokenId> ids, bool skip_special) const {
  return tok::utf8_sanitize(decode(ids, skip_special));
}

bool Tokenizer::is_special(TokenId id) const { return is_valid(id) && impl_->special[id]; }

bool Tokenizer::is_eog(TokenId id) const {
  for (TokenId e : impl_->eog)
    if (e == id) return true;
  return false;
}

TokenId Tokenizer::find_token(std::string_view text) const {
  auto it = impl_->text_to_id.find(text);
  return it == impl_->text_to_id.end() ? -1 : it->second;
}

}  // namespace mla
