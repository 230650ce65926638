// gguf split / merge with llama-gguf-split's byte layout (see gguf_split.h for the rules).
#include "gguf/gguf_split.h"

#include <filesystem>
#include <limits>

#include "util/error.h"

namespace mla {
namespace {

// gguf-split rounds sizes and pads data to ggml's default alignment, whatever the file's own.
constexpr uint64_t kSplitPad = 32;

GgufValue u16(uint16_t x) { return GgufValue{GgufValue::Storage{std::in_place_index<2>, x}}; }

// ggml stores a tensor's dimension count without trailing 1s (at least one), and gguf-split
// writes what ggml holds: {64, 1} is written as {64}.
std::vector<int64_t> ggml_dims(std::vector<int64_t> ne) {
  while (ne.size() > 1 && ne.back() == 1) ne.pop_back();
  return ne;
}

void add_ref(GgufWriter& w, const GgufTensorInfo& t) {
  w.add_tensor_ref(t.name, t.type, ggml_dims(t.ne), t.data, t.n_bytes);
}

}  // namespace

uint64_t parse_split_size(const std::string& s) {
  uint64_t unit = s.empty() ? 0 : s.back() == 'M' ? 1000ull * 1000 : s.back() == 'G' ? 1000ull * 1000 * 1000 : 0;
  if (unit == 0) fail("gguf split: size '{}' must be a number followed by M or G (e.g. 50G)", s);
  std::string digits = s.substr(0, s.size() - 1);
  uint64_t n = 0;
  for (char c : digits) {
    if (c < '0' || c > '9' || n > std::numeric_limits<uint32_t>::max())
      fail("gguf split: size '{}' must be a number followed by M or G (e.g. 50G)", s);
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  if (digits.empty() || n == 0) fail("gguf split: size '{}' must be positive", s);
  return n * unit;
}

std::vector<std::vector<size_t>> gguf_split_plan(const GgufFile& in, const GgufSplitOptions& o) {
  if (o.max_bytes == 0 && o.max_tensors < 1)
    fail("gguf split: --split-max-tensors must be at least 1 (got {})", o.max_tensors);
  const auto& tensors = in.tensors();
  std::vector<std::vector<size_t>> plan(1);
  auto new_shard = [&](size_t next_tensor) {
    if (plan.back().empty())
      fail("gguf split: shard {} would hold no tensors: tensor '{}' ({} bytes) is larger than --split-max-size {}",
           plan.size(), tensors[next_tensor].name, tensors[next_tensor].n_bytes, o.max_bytes);
    plan.emplace_back();
  };
  if (o.no_tensor_first_split) plan.emplace_back();
  uint64_t shard_bytes = 0;  // tensor bytes in the current shard, each rounded up to kSplitPad
  for (size_t i = 0; i < tensors.size(); ++i) {
    uint64_t n = (tensors[i].n_bytes + kSplitPad - 1) / kSplitPad * kSplitPad;
    bool split = o.max_bytes > 0 ? shard_bytes + n > o.max_bytes : i > 0 && i % static_cast<size_t>(o.max_tensors) == 0;
    if (split) {
      new_shard(i);
      shard_bytes = n;
    } else {
      shard_bytes += n;
    }
    plan.back().push_back(i);
  }
  if (plan.size() > std::numeric_limits<uint16_t>::max())
    fail("gguf split: {} shards is more than split.count can hold (65535)", plan.size());
  if (tensors.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    fail("gguf split: {} tensors is more than split.tensors.count can hold", tensors.size());
  return plan;
}

std::vector<std::string> gguf_split_write(const GgufFile& in, const std::string& prefix, const GgufSplitOptions& o) {
  auto plan = gguf_split_plan(in, o);
  const int n_shards = static_cast<int>(plan.size());
  std::vector<std::string> paths;
  for (int s = 0; s < n_shards; ++s) {
    GgufWriter w;
    if (s == 0)
      for (const auto& [k, v] : in.metadata())
        if (!is_gguf_split_key(k)) w.set(k, v);
    w.set(std::string(gguf_split_key::kNo), u16(static_cast<uint16_t>(s)));
    w.set(std::string(gguf_split_key::kTensorsCount), GgufValue::i32(static_cast<int32_t>(in.tensors().size())));
    w.set(std::string(gguf_split_key::kCount), u16(static_cast<uint16_t>(n_shards)));
    for (size_t i : plan[s]) add_ref(w, in.tensors()[i]);
    paths.push_back(gguf_split_path(prefix, s, n_shards));
    w.write(paths.back());
  }
  return paths;
}

void gguf_merge_write(const GgufFile& in, const std::string& out) {
  std::optional<uint64_t> count =
      in.has(gguf_split_key::kCount) ? std::optional(in.get_uint(gguf_split_key::kCount)) : std::nullopt;
  if (!count || *count == 0)
    fail("gguf merge: {}: not a split model (no {} key, or 0)", in.path(), gguf_split_key::kCount);
  std::error_code ec;
  if (std::filesystem::exists(out, ec)) fail("gguf merge: output file '{}' already exists", out);
  GgufWriter w;
  for (const auto& [k, v] : in.metadata())
    if (k != gguf_split_key::kCount) w.set(k, v);
  // Marks the output as no longer split, as gguf-split does (split.no and the total stay).
  w.set(std::string(gguf_split_key::kCount), u16(0));
  for (const auto& t : in.tensors()) add_ref(w, t);
  w.write(out);
}

}  // namespace mla
