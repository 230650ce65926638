#pragma once
// GGUF v2/v3 reader (memory-mapped, validating) and writer.
//
// The reader never trusts the file: every count, length, offset and dimension is checked
// against the bytes that exist, and each problem is reported as one mla::Error whose message
// names the byte offset ("gguf: <file>: at byte 1234: string length 9e18 exceeds file size").
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "util/ggml_type.h"

namespace mla {

enum class GgufValueType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};
std::string_view gguf_value_type_name(GgufValueType t);

struct GgufValue;
struct GgufArray {
  GgufValueType elem_type = GgufValueType::UINT8;
  std::vector<GgufValue> items;
};

struct GgufValue {
  using Storage = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool, std::string,
                               GgufArray, uint64_t, int64_t, double>;
  Storage v;  // the variant index equals the GgufValueType id

  GgufValueType type() const { return static_cast<GgufValueType>(v.index()); }
  bool is_integer() const;
  bool is_float() const;
  // Lossless numeric views; throw mla::Error("... expected integer, got STRING") otherwise.
  int64_t as_int() const;    // any integer type (UINT64 above INT64_MAX → error), BOOL not included
  uint64_t as_uint() const;  // any non-negative integer
  double as_float() const;   // FLOAT32/FLOAT64, or an integer
  bool as_bool() const;
  const std::string& as_string() const;
  const GgufArray& as_array() const;

  // Human-readable rendering; arrays longer than max_items are abbreviated "[a, b, ... (N items)]".
  std::string to_string(size_t max_items = 8) const;

  static GgufValue str(std::string s) { return GgufValue{Storage{std::in_place_index<8>, std::move(s)}}; }
  static GgufValue u32(uint32_t x) { return GgufValue{Storage{std::in_place_index<4>, x}}; }
  static GgufValue i32(int32_t x) { return GgufValue{Storage{std::in_place_index<5>, x}}; }
  static GgufValue u64(uint64_t x) { return GgufValue{Storage{std::in_place_index<10>, x}}; }
  static GgufValue f32(float x) { return GgufValue{Storage{std::in_place_index<6>, x}}; }
  static GgufValue boolean(bool x) { return GgufValue{Storage{std::in_place_index<7>, x}}; }
  static GgufValue array(GgufValueType elem, std::vector<GgufValue> items) {
    return GgufValue{Storage{std::in_place_index<9>, GgufArray{elem, std::move(items)}}};
  }
  static GgufValue strings(const std::vector<std::string>& xs);
  static GgufValue f32s(const std::vector<float>& xs);
  static GgufValue i32s(const std::vector<int32_t>& xs);
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // dimensions in ggml order: ne[0] is the contiguous (row) length
  GgmlType type;
  // The id the file stores: `type`'s, except for an ik_llama.cpp row-interleaved form converted at
  // load (gguf/interleaved.h), whose rows `data` then holds in `type`'s layout.
  uint32_t file_type_id = 0;
  uint64_t offset = 0;  // relative to the start of its shard's data section
  uint64_t n_bytes = 0;
  int64_t n_elements = 0;
  const uint8_t* data = nullptr;  // into its shard's mapping; valid while the GgufFile lives
  uint32_t shard = 0;             // index into GgufFile::shards() (0 for a single file)
  bool converted = false;         // data holds rows converted at load, not the file's bytes

  int64_t n_rows() const { return ne.empty() ? 1 : n_elements / ne[0]; }
  std::string shape_string() const;  // "{7168, 1536}"
};

// One file of a model: a single GGUF, or one shard of a split model.
struct GgufShard {
  std::string path;
  uint64_t file_size = 0;
  uint64_t data_offset = 0;
  size_t n_tensors = 0;
};

// The split keys llama.cpp's gguf-split writes into every shard (split.no is 0-based).
namespace gguf_split_key {
inline constexpr std::string_view kNo = "split.no";                       // UINT16
inline constexpr std::string_view kCount = "split.count";                 // UINT16
inline constexpr std::string_view kTensorsCount = "split.tensors.count";  // INT32, over all shards
}  // namespace gguf_split_key
inline bool is_gguf_split_key(std::string_view k) {
  return k == gguf_split_key::kNo || k == gguf_split_key::kCount || k == gguf_split_key::kTensorsCount;
}

// "PREFIX-00002-of-00010.gguf" for shard index 1 of 10 (llama.cpp's naming, 1-based).
std::string gguf_split_path(std::string_view prefix, int shard_index, int n_shards);

class GgufFile;
// XXH3-64 of a model file's header (metadata and tensor infos) and of the first and last 64 KiB of
// its tensor data (the first shard's, for a split model): two copies of a model that differ in
// their weights only are told apart too, while reading little of the file. MPI ranks compare it
// at start-up; the prefix cache's disk tier keys its blocks by it. Throws mla::Error when the
// file cannot be read back.
uint64_t gguf_file_fingerprint(const GgufFile& f);

class GgufFile {
 public:
  // Maps and validates the whole model. Throws mla::Error. A file carrying split.count > 1 is
  // one shard of a split model (named PREFIX-%05d-of-%05d.gguf): any shard's name opens all of
  // them, each mapped and validated, and the result is one view — metadata of the first shard,
  // tensors of every shard in shard order, each tensor's data in its own shard's mapping.
  // prefault: once validated, ask the kernel to map every page of every shard now
  // (MADV_POPULATE_READ, else MADV_WILLNEED), so the first forward pass does not stall on page
  // faults; model loading uses it, inspection does not.
  static std::unique_ptr<GgufFile> open(const std::string& path, bool prefault = false);
  // Parses bytes the caller keeps alive (tests, fuzzing). Throws mla::Error.
  static std::unique_ptr<GgufFile> parse(const uint8_t* data, size_t size, std::string label = "<memory>");
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  // path, data_offset and file_size are those of the first shard (the only file when not split).
  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return size_; }
  // Every file of the model in shard order; one entry for a single file.
  std::vector<GgufShard> shards() const;

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }
  // Required: a missing key throws "gguf: missing required key 'deepseek2.block_count'".
  const GgufValue& require(std::string_view key) const;
  int64_t get_int(std::string_view key) const;
  uint64_t get_uint(std::string_view key) const;
  double get_float(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  const std::string& get_string(std::string_view key) const;
  const GgufArray& get_array(std::string_view key) const;
  std::vector<std::string> get_strings(std::string_view key) const;
  std::vector<float> get_floats(std::string_view key) const;
  std::vector<int64_t> get_ints(std::string_view key) const;
  // Optional: nullopt when absent; a present key of the wrong type still throws.
  std::optional<int64_t> opt_int(std::string_view key) const;
  std::optional<uint64_t> opt_uint(std::string_view key) const;
  std::optional<double> opt_float(std::string_view key) const;
  std::optional<bool> opt_bool(std::string_view key) const;
  std::optional<std::string> opt_string(std::string_view key) const;

  // Tensors of every shard, in shard order then file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  const GgufTensorInfo& require_tensor(std::string_view name) const;
  // The engine whose tensor-type id space the file's ids were read in: "llama.cpp" or
  // "ik_llama.cpp" when the file holds an id only that engine assigns, else "either" (every id
  // means the same format in both; gguf/type_ids.h).
  const std::string& type_id_space() const { return type_id_space_; }

 private:
  GgufFile() = default;
  void parse_all();
  static std::unique_ptr<GgufFile> map_one(const std::string& path);
  static int split_count_of(const GgufFile& f);  // 0 or 1: not split
  static std::unique_ptr<GgufFile> open_split(std::unique_ptr<GgufFile> given, int n_shards);
  void append_shard(std::unique_ptr<GgufFile> shard);
  void prefault_all() const;

  std::string path_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  void* map_ = nullptr;  // non-null when we own an mmap
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
  std::string type_id_space_ = "either";
  std::vector<std::vector<uint8_t>> converted_;         // tensors converted at load (their data points here)
  size_t n_own_tensors_ = 0;                            // tensors in this file (the first shard)
  std::vector<std::unique_ptr<GgufFile>> more_shards_;  // shards 2..N; own their mappings
};

// Builds a GGUF v3 file. Keys keep insertion order; set() replaces an existing key in place.
// Tensor data is laid out at `general.alignment` (default 32), each tensor padded with zeros.
class GgufWriter {
 public:
  void set(std::string key, GgufValue value);
  const GgufValue* find(std::string_view key) const;
  void remove(std::string_view key);
  // data must hold ggml_row_bytes(type, ne[0]) * rows bytes. Throws on a bad shape or duplicate name.
  void add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne, std::vector<uint8_t> data);
  void add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne, const void* data, size_t n_bytes);
  // Like add_tensor, without copying: the bytes are read when the file is written, so the caller
  // keeps them alive until then (e.g. a tensor of an open GgufFile).
  void add_tensor_ref(std::string name, GgmlType type, std::vector<int64_t> ne, const void* data, size_t n_bytes);
  // A tensor of n_bytes whose bytes `make` produces when the file is written (and then drops), so
  // that a file larger than memory is written one tensor at a time. make must return n_bytes bytes.
  void add_tensor_lazy(std::string name, GgmlType type, std::vector<int64_t> ne, size_t n_bytes,
                       std::function<std::vector<uint8_t>()> make);
  // Copies every key of an existing file except the split.* keys (the copy is one file).
  void copy_metadata_from(const GgufFile& f);

  size_t n_tensors() const { return tensors_.size(); }
  std::vector<uint8_t> to_bytes() const;
  // Streams the header, then each tensor's bytes, to path.tmp, then renames it to path.
  void write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> owned;
    const uint8_t* ref = nullptr;  // the caller's bytes (add_tensor_ref), else null
    size_t n_bytes = 0;
    std::function<std::vector<uint8_t>()> make;  // add_tensor_lazy
    const uint8_t* bytes() const { return ref ? ref : owned.data(); }
  };
  uint64_t alignment() const;
  // Calls emit(bytes, n) with the tensor's bytes (a lazy tensor's made for the call).
  static void with_bytes(const Tensor& t, const std::function<void(const uint8_t*, size_t)>& emit);
  std::vector<uint8_t> header_bytes() const;  // metadata, tensor infos, padding to the data section
  void check_tensor(const std::string& name, GgmlType type, const std::vector<int64_t>& ne, size_t n_bytes) const;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace mla
