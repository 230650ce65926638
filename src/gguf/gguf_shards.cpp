// Split GGUF models (llama.cpp's gguf-split layout): finding, checking and joining the shards.
//
// Each shard is a complete GGUF file named PREFIX-%05d-of-%05d.gguf (1-based) that carries
// split.no (UINT16, 0-based), split.count (UINT16) and split.tensors.count (INT32, the total over
// all shards); the first shard also carries all the model's metadata.
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "gguf/gguf.h"
#include "util/error.h"

namespace mla {
namespace {

// A split key with the exact type gguf-split writes; nullopt when absent.
template <typename T>
std::optional<T> split_key(const GgufFile& f, std::string_view key, GgufValueType want) {
  const GgufValue* v = f.find(key);
  if (!v) return std::nullopt;
  if (v->type() != want)
    fail("gguf: {}: key '{}' has type {}, expected {}", f.path(), key, gguf_value_type_name(v->type()),
         gguf_value_type_name(want));
  return std::get<T>(v->v);
}

std::optional<uint16_t> split_no(const GgufFile& f) {
  return split_key<uint16_t>(f, gguf_split_key::kNo, GgufValueType::UINT16);
}
std::optional<uint16_t> split_count(const GgufFile& f) {
  return split_key<uint16_t>(f, gguf_split_key::kCount, GgufValueType::UINT16);
}
std::optional<int32_t> split_tensors_count(const GgufFile& f) {
  return split_key<int32_t>(f, gguf_split_key::kTensorsCount, GgufValueType::INT32);
}

struct ShardName {
  std::string prefix;
  int number = 0;  // 1-based
  int count = 0;
};

// "PREFIX-00002-of-00010.gguf" → {PREFIX, 2, 10}; nullopt for any other name.
std::optional<ShardName> parse_shard_name(std::string_view path) {
  constexpr size_t kTail = 20;  // "-00002-of-00010.gguf"
  if (path.size() <= kTail) return std::nullopt;
  std::string_view tail = path.substr(path.size() - kTail);
  if (tail[0] != '-' || tail.substr(6, 4) != "-of-" || tail.substr(15) != ".gguf") return std::nullopt;
  auto number = [&](size_t at) {
    int n = 0;
    for (size_t i = at; i < at + 5; ++i) {
      if (tail[i] < '0' || tail[i] > '9') return -1;
      n = n * 10 + (tail[i] - '0');
    }
    return n;
  };
  ShardName s{std::string(path.substr(0, path.size() - kTail)), number(1), number(10)};
  if (s.number < 1 || s.count < 1) return std::nullopt;
  return s;
}

}  // namespace

std::string gguf_split_path(std::string_view prefix, int shard_index, int n_shards) {
  return fmt::format("{}-{:05d}-of-{:05d}.gguf", prefix, shard_index + 1, n_shards);
}

int GgufFile::split_count_of(const GgufFile& f) {
  std::optional<uint16_t> count = split_count(f);
  if (!count) {
    // A later shard that lost its split keys would otherwise open as a model of its own.
    std::optional<ShardName> name = parse_shard_name(f.path());
    if (name && name->count > 1 && name->number > 1)
      fail("gguf: {}: named as shard {} of {} but has no '{}' key", f.path(), name->number, name->count,
           gguf_split_key::kCount);
    return 1;
  }
  // 1: a split of one file; 0: what gguf-split's merge leaves in its output. Both are one file.
  if (*count == 1) {
    std::optional<int32_t> n = split_tensors_count(f);
    if (n && *n != static_cast<int64_t>(f.tensors().size()))
      fail("gguf: {}: {} is {} but the file holds {} tensors", f.path(), gguf_split_key::kTensorsCount, *n,
           f.tensors().size());
  }
  return *count;
}

std::unique_ptr<GgufFile> GgufFile::open_split(std::unique_ptr<GgufFile> given, int n_shards) {
  const std::string given_path = given->path_;
  std::optional<uint16_t> no = split_no(*given);
  if (!no)
    fail("gguf: {}: {} is {} but key '{}' is missing", given_path, gguf_split_key::kCount, n_shards,
         gguf_split_key::kNo);
  if (*no >= n_shards)
    fail("gguf: {}: {} is {}, not below {} {}", given_path, gguf_split_key::kNo, *no, gguf_split_key::kCount, n_shards);
  std::optional<ShardName> name = parse_shard_name(given_path);
  std::string want_tail = gguf_split_path("", *no, n_shards);
  if (!name || name->number != *no + 1 || name->count != n_shards)
    fail("gguf: {}: shard {} of {} ({} {}, {} {}) must be named PREFIX{}", given_path, *no + 1, n_shards,
         gguf_split_key::kNo, *no, gguf_split_key::kCount, n_shards, want_tail);

  std::vector<std::unique_ptr<GgufFile>> shards(static_cast<size_t>(n_shards));
  shards[*no] = std::move(given);
  for (int i = 0; i < n_shards; ++i) {
    if (shards[i]) continue;
    std::string path = gguf_split_path(name->prefix, i, n_shards);
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
      fail("gguf: {}: shard {} of {} is missing ({}), needed by {}", path, i + 1, n_shards, std::strerror(errno),
           given_path);
    shards[i] = map_one(path);
    const GgufFile& s = *shards[i];
    std::optional<uint16_t> s_count = split_count(s);
    std::optional<uint16_t> s_no = split_no(s);
    if (!s_count || !s_no)
      fail("gguf: {}: has no '{}' key, so it is not shard {} of {} of {}", path,
           s_count ? gguf_split_key::kNo : gguf_split_key::kCount, i + 1, n_shards, given_path);
    if (*s_count != n_shards)
      fail("gguf: {}: {} is {}, expected {} as in {}: a shard of another model", path, gguf_split_key::kCount, *s_count,
           n_shards, given_path);
    if (*s_no != i)
      fail("gguf: {}: {} is {} (shard {}), expected {}: a shard of another model or a renamed file", path,
           gguf_split_key::kNo, *s_no, *s_no + 1, i);
  }

  std::unique_ptr<GgufFile> first = std::move(shards[0]);
  std::optional<int32_t> n_total = split_tensors_count(*first);
  if (!n_total) fail("gguf: {}: split model without key '{}'", first->path_, gguf_split_key::kTensorsCount);
  for (int i = 1; i < n_shards; ++i) {
    std::optional<int32_t> n = split_tensors_count(*shards[i]);
    if (n && *n != *n_total)
      fail("gguf: {}: {} is {}, but {} says {}: a shard of another model", shards[i]->path_,
           gguf_split_key::kTensorsCount, *n, first->path_, *n_total);
    first->append_shard(std::move(shards[i]));
  }
  if (static_cast<int64_t>(first->tensors_.size()) != *n_total)
    fail("gguf: {}: {} is {} but the {} shards hold {} tensors", first->path_, gguf_split_key::kTensorsCount, *n_total,
         n_shards, first->tensors_.size());
  return first;
}

void GgufFile::append_shard(std::unique_ptr<GgufFile> shard) {
  const uint32_t index = static_cast<uint32_t>(more_shards_.size() + 1);
  // Each shard's ids were read on its own evidence; a split model is one engine's output.
  if (shard->type_id_space_ != type_id_space_) {
    if (type_id_space_ != "either" && shard->type_id_space_ != "either")
      fail("gguf: {}: its tensor type ids are {}'s but {}'s are {}'s", shard->path_, shard->type_id_space_, path_,
           type_id_space_);
    if (type_id_space_ == "either") type_id_space_ = shard->type_id_space_;
  }
  tensors_.reserve(tensors_.size() + shard->tensors_.size());
  for (const GgufTensorInfo& t : shard->tensors_) {
    auto it = tensor_index_.find(t.name);
    if (it != tensor_index_.end()) {
      uint32_t other = tensors_[it->second].shard;
      fail("gguf: {}: tensor '{}' is also in {}", shard->path_, t.name,
           other == 0 ? path_ : more_shards_[other - 1]->path_);
    }
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(t);
    tensors_.back().shard = index;
  }
  more_shards_.push_back(std::move(shard));
}

std::vector<GgufShard> GgufFile::shards() const {
  std::vector<GgufShard> out;
  out.push_back({path_, size_, data_offset_, n_own_tensors_});
  for (const auto& s : more_shards_) out.push_back({s->path_, s->size_, s->data_offset_, s->n_own_tensors_});
  return out;
}

}  // namespace mla
