// GGUF reader: maps the file and validates every field before anything uses it.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "gguf/gguf.h"
#include "gguf/interleaved.h"
#include "gguf/type_ids.h"
#include "util/error.h"

namespace mla {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr int kMaxDims = 4;
constexpr int kMaxArrayDepth = 8;

// Minimum encoded size of one value of each type, used to bound counts before allocating.
uint64_t min_value_bytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8:
    case GgufValueType::INT8:
    case GgufValueType::BOOL:
      return 1;
    case GgufValueType::UINT16:
    case GgufValueType::INT16:
      return 2;
    case GgufValueType::UINT32:
    case GgufValueType::INT32:
    case GgufValueType::FLOAT32:
      return 4;
    case GgufValueType::UINT64:
    case GgufValueType::INT64:
    case GgufValueType::FLOAT64:
    case GgufValueType::STRING:
      return 8;  // a string: its 8-byte length
    case GgufValueType::ARRAY:
      return 12;
  }
  return 1;
}

class Cursor {
 public:
  Cursor(const uint8_t* base, uint64_t size, const std::string& label) : base_(base), size_(size), label_(label) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  template <typename... Args>
  [[noreturn]] void error_at(uint64_t at, fmt::format_string<Args...> f, Args&&... args) const {
    throw Error(fmt::format("gguf: {}: at byte {}: {}", label_, at, fmt::format(f, std::forward<Args>(args)...)));
  }

  void need(uint64_t n, const char* what) const {
    if (n > remaining()) error_at(pos_, "truncated file: {} needs {} bytes but only {} remain", what, n, remaining());
  }

  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T x;
    std::memcpy(&x, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return x;
  }

  std::string read_string(const char* what) {
    uint64_t at = pos_;
    uint64_t len = read<uint64_t>(what);
    if (len > remaining()) error_at(at, "{} length {} exceeds the {} bytes left in the file", what, len, remaining());
    std::string s(reinterpret_cast<const char*>(base_ + pos_), len);
    pos_ += len;
    return s;
  }

 private:
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& label_;
};

GgufValue read_value(Cursor& c, uint32_t raw_type, int depth);

GgufValueType check_value_type(Cursor& c, uint64_t at, uint32_t raw) {
  if (raw > static_cast<uint32_t>(GgufValueType::FLOAT64)) c.error_at(at, "unknown metadata value type {}", raw);
  return static_cast<GgufValueType>(raw);
}

GgufValue read_array(Cursor& c, int depth) {
  if (depth >= kMaxArrayDepth) c.error_at(c.pos(), "arrays nested deeper than {}", kMaxArrayDepth);
  uint64_t at = c.pos();
  uint32_t raw_elem = c.read<uint32_t>("array element type");
  GgufValueType elem = check_value_type(c, at, raw_elem);
  uint64_t count_at = c.pos();
  uint64_t count = c.read<uint64_t>("array length");
  if (count > c.remaining() / min_value_bytes(elem))
    c.error_at(count_at, "array of {} {} values cannot fit in the {} bytes left", count, gguf_value_type_name(elem),
               c.remaining());
  GgufArray arr;
  arr.elem_type = elem;
  arr.items.reserve(count);
  for (uint64_t i = 0; i < count; ++i) arr.items.push_back(read_value(c, raw_elem, depth + 1));
  return GgufValue{GgufValue::Storage{std::in_place_index<9>, std::move(arr)}};
}

GgufValue read_value(Cursor& c, uint32_t raw_type, int depth) {
  using S = GgufValue::Storage;
  switch (static_cast<GgufValueType>(raw_type)) {
    case GgufValueType::UINT8:
      return GgufValue{S{std::in_place_index<0>, c.read<uint8_t>("UINT8 value")}};
    case GgufValueType::INT8:
      return GgufValue{S{std::in_place_index<1>, c.read<int8_t>("INT8 value")}};
    case GgufValueType::UINT16:
      return GgufValue{S{std::in_place_index<2>, c.read<uint16_t>("UINT16 value")}};
    case GgufValueType::INT16:
      return GgufValue{S{std::in_place_index<3>, c.read<int16_t>("INT16 value")}};
    case GgufValueType::UINT32:
      return GgufValue{S{std::in_place_index<4>, c.read<uint32_t>("UINT32 value")}};
    case GgufValueType::INT32:
      return GgufValue{S{std::in_place_index<5>, c.read<int32_t>("INT32 value")}};
    case GgufValueType::FLOAT32:
      return GgufValue{S{std::in_place_index<6>, c.read<float>("FLOAT32 value")}};
    case GgufValueType::BOOL: {
      uint64_t at = c.pos();
      uint8_t b = c.read<uint8_t>("BOOL value");
      if (b > 1) c.error_at(at, "BOOL value {} is neither 0 nor 1", b);
      return GgufValue{S{std::in_place_index<7>, b == 1}};
    }
    case GgufValueType::STRING:
      return GgufValue{S{std::in_place_index<8>, c.read_string("string")}};
    case GgufValueType::ARRAY:
      return read_array(c, depth);
    case GgufValueType::UINT64:
      return GgufValue{S{std::in_place_index<10>, c.read<uint64_t>("UINT64 value")}};
    case GgufValueType::INT64:
      return GgufValue{S{std::in_place_index<11>, c.read<int64_t>("INT64 value")}};
    case GgufValueType::FLOAT64:
      return GgufValue{S{std::in_place_index<12>, c.read<double>("FLOAT64 value")}};
  }
  c.error_at(c.pos(), "unknown metadata value type {}", raw_type);
}

uint32_t byteswap32(uint32_t x) { return __builtin_bswap32(x); }

}  // namespace

std::string GgufTensorInfo::shape_string() const {
  std::string out = "{";
  for (size_t i = 0; i < ne.size(); ++i) out += (i ? ", " : "") + std::to_string(ne[i]);
  return out + "}";
}

std::unique_ptr<GgufFile> GgufFile::map_one(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("gguf: cannot open '{}': {}", path, std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail("gguf: cannot stat '{}': {}", path, std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("gguf: '{}' is not a regular file", path);
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    fail("gguf: {}: at byte 0: file is empty", path);
  }
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int e = errno;
  ::close(fd);
  if (map == MAP_FAILED) fail("gguf: cannot map '{}': {}", path, std::strerror(e));
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->base_ = static_cast<const uint8_t*>(map);
  f->size_ = size;
  f->map_ = map;
  f->parse_all();  // on throw, the destructor unmaps
  return f;
}

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path, bool prefault) {
  std::unique_ptr<GgufFile> f = map_one(path);
  int n_shards = split_count_of(*f);
  if (n_shards > 1) f = open_split(std::move(f), n_shards);
  if (prefault) f->prefault_all();
  return f;
}

void GgufFile::prefault_all() const {
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14
#endif
  // Best effort: a kernel without POPULATE_READ gets a read-ahead hint instead.
  auto one = [](void* map, uint64_t size) {
    if (map && madvise(map, size, MADV_POPULATE_READ) != 0) madvise(map, size, MADV_WILLNEED);
  };
  one(map_, size_);
  for (const auto& s : more_shards_) one(s->map_, s->size_);
}

std::unique_ptr<GgufFile> GgufFile::parse(const uint8_t* data, size_t size, std::string label) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = std::move(label);
  f->base_ = data;
  f->size_ = size;
  f->parse_all();
  return f;
}

GgufFile::~GgufFile() {
  if (map_) munmap(map_, size_);
}

namespace {

// The magic and version; throws (naming the byte offset) for anything but GGUF version 2 or 3.
uint32_t read_magic_and_version(Cursor& c) {
  uint32_t magic = c.read<uint32_t>("magic");
  if (magic != kMagic) {
    uint8_t m[4];
    std::memcpy(m, &magic, 4);
    c.error_at(0, "not a GGUF file (magic bytes {:02x} {:02x} {:02x} {:02x}, expected 'GGUF')", m[0], m[1], m[2], m[3]);
  }
  const uint32_t version = c.read<uint32_t>("version");
  if (version == 1) c.error_at(4, "GGUF version 1 is not supported (only 2 and 3)");
  if (version != 2 && version != 3) {
    uint32_t swapped = byteswap32(version);
    if (swapped == 2 || swapped == 3)
      c.error_at(4, "big-endian GGUF (version {} byte-swapped) is not supported", swapped);
    c.error_at(4, "unsupported GGUF version {} (expected 2 or 3)", version);
  }
  return version;
}

// A tensor info as read, before its type id is resolved (which needs every tensor's id).
struct RawTensorInfo {
  GgufTensorInfo info;
  uint32_t raw_type = 0;
  uint64_t type_at = 0, dims_at = 0;  // where the type id and the dimensions are (for messages)
};

// Tensor info i: name, dimensions, raw type id, offset (aligned), element count.
RawTensorInfo read_tensor_info(Cursor& c, uint64_t i, uint64_t alignment) {
  uint64_t at = c.pos();
  RawTensorInfo raw;
  GgufTensorInfo& t = raw.info;
  t.name = c.read_string("tensor name");
  if (t.name.empty()) c.error_at(at, "tensor {} has an empty name", i);
  uint64_t dims_at = c.pos();
  uint32_t n_dims = c.read<uint32_t>("tensor dimension count");
  if (n_dims == 0 || n_dims > kMaxDims)
    c.error_at(dims_at, "tensor '{}' has {} dimensions (expected 1 to {})", t.name, n_dims, kMaxDims);
  int64_t n_el = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t ne_at = c.pos();
    uint64_t ne = c.read<uint64_t>("tensor dimension");
    if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      c.error_at(ne_at, "tensor '{}' dimension {} is {} (negative or too large)", t.name, d, ne);
    int64_t ne_s = static_cast<int64_t>(ne);
    if (ne_s != 0 && n_el > std::numeric_limits<int64_t>::max() / ne_s)
      c.error_at(ne_at, "tensor '{}': element count overflows int64", t.name);
    n_el *= ne_s;
    t.ne.push_back(ne_s);
  }
  raw.type_at = c.pos();
  raw.raw_type = c.read<uint32_t>("tensor type");
  raw.dims_at = dims_at;
  uint64_t off_at = c.pos();
  t.offset = c.read<uint64_t>("tensor offset");
  if (t.offset % alignment != 0)
    c.error_at(off_at, "tensor '{}' offset {} is not a multiple of the alignment {}", t.name, t.offset, alignment);
  t.n_elements = n_el;
  return raw;
}

// Each tensor's type (gguf/type_ids.h decides the id space from the whole file), then its block
// geometry and byte size. data_size: bytes from the data section's start to the end of the file.
// interleaved: per tensor, the ik_llama.cpp row-interleaved form to convert at load, or nullptr.
std::string resolve_tensor_types(Cursor& c, std::vector<RawTensorInfo>& raws, std::optional<int64_t> file_type,
                                 uint64_t data_size, std::vector<const IkInterleavedForm*>& interleaved) {
  std::vector<uint64_t> next_offset(raws.size(), data_size);
  {
    std::vector<size_t> order(raws.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return raws[a].info.offset < raws[b].info.offset; });
    for (size_t k = 0; k + 1 < order.size(); ++k) next_offset[order[k]] = raws[order[k + 1]].info.offset;
  }
  std::vector<TypeIdTensor> ids;
  ids.reserve(raws.size());
  for (size_t i = 0; i < raws.size(); ++i) {
    const GgufTensorInfo& t = raws[i].info;
    const uint64_t room = next_offset[i] >= t.offset ? next_offset[i] - t.offset : 0;
    ids.push_back({t.name, raws[i].raw_type, t.n_elements, t.ne[0], room});
  }
  TypeIdResolution res;
  try {
    res = resolve_type_ids(ids, file_type);
  } catch (const TypeIdError& e) {
    c.error_at(raws[e.tensor()].type_at, "{}", e.what());
  }
  interleaved = res.interleaved;
  for (size_t i = 0; i < raws.size(); ++i) {
    GgufTensorInfo& t = raws[i].info;
    t.type = res.types[i];
    t.file_type_id = raws[i].raw_type;
    const GgmlTypeTraits& tr = ggml_traits(t.type);
    if (const IkInterleavedForm* f = interleaved[i];
        f && t.ne[0] != 0 && (t.n_elements / t.ne[0]) % f->n_interleaved != 0)
      c.error_at(raws[i].dims_at, "tensor '{}' of type {} has {} rows, not a multiple of {}", t.name,
                 type_id_label(f->name, TypeIdSpace::Ik, f->ik_id), t.n_elements / t.ne[0], f->n_interleaved);
    if (const IkInterleavedForm* f = interleaved[i]; f && t.ne[0] % f->row_block_elems() != 0)
      c.error_at(raws[i].dims_at,
                 "tensor '{}' of type {} has row length {}: mla.cpp reads it as {}, which needs rows of a multiple "
                 "of {}",
                 t.name, type_id_label(f->name, TypeIdSpace::Ik, f->ik_id), t.ne[0], tr.name, f->row_block_elems());
    if (t.ne[0] % tr.block_elems != 0)
      c.error_at(raws[i].dims_at, "tensor '{}' of type {} has row length {}, not a multiple of its block size {}",
                 t.name, type_id_label(tr.name, res.spaces[i], raws[i].raw_type), t.ne[0], tr.block_elems);
    // n_bytes = rows * (row header + blocks per row * block bytes), computed without overflow: the
    // bytes in the file (a converted form's own geometry; the reader resets it after converting).
    const IkInterleavedForm* form = interleaved[i];
    const int64_t block_elems = form && form->file_block_elems ? form->file_block_elems : tr.block_elems;
    const int64_t block_bytes = form && form->file_block_elems ? form->file_block_bytes : tr.block_bytes;
    const int64_t meta_bytes = form && form->file_block_elems ? form->file_row_meta_bytes : tr.row_meta_bytes;
    const uint64_t n_rows = t.ne[0] == 0 ? 0 : static_cast<uint64_t>(t.n_elements / t.ne[0]);
    const auto blocks_per_row = static_cast<uint64_t>(t.ne[0] / block_elems);
    if (blocks_per_row > (std::numeric_limits<uint64_t>::max() - 8) / static_cast<uint64_t>(block_bytes))
      c.error_at(raws[i].dims_at, "tensor '{}': byte size overflows", t.name);
    const uint64_t row_bytes = static_cast<uint64_t>(meta_bytes) + blocks_per_row * block_bytes;
    if (row_bytes != 0 && n_rows > std::numeric_limits<uint64_t>::max() / row_bytes)
      c.error_at(raws[i].dims_at, "tensor '{}': byte size overflows", t.name);
    t.n_bytes = n_rows * row_bytes;
  }
  return std::string(type_id_space_name(res.space));
}

// Bounds, then overlap: sort by offset and require each tensor to end before the next begins.
// info_pos[i]: where tensor i's info starts (for the message).
void check_tensor_extents(Cursor& c, const std::vector<GgufTensorInfo>& tensors, const std::vector<uint64_t>& info_pos,
                          uint64_t data_size) {
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    if (t.offset > data_size || t.n_bytes > data_size - t.offset)
      c.error_at(info_pos[i], "tensor '{}' data [{}, +{}) runs past the end of the file (data section has {} bytes)",
                 t.name, t.offset, t.n_bytes, data_size);
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return tensors[a].offset < tensors[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const auto& prev = tensors[order[k - 1]];
    const auto& cur = tensors[order[k]];
    if (prev.offset + prev.n_bytes > cur.offset)
      c.error_at(info_pos[order[k]], "tensor '{}' data at offset {} overlaps tensor '{}' [{}, +{})", cur.name,
                 cur.offset, prev.name, prev.offset, prev.n_bytes);
  }
}

}  // namespace

void GgufFile::parse_all() {
  Cursor c(base_, size_, path_);
  version_ = read_magic_and_version(c);
  uint64_t n_tensors_at = c.pos();
  uint64_t n_tensors = c.read<uint64_t>("tensor count");
  uint64_t n_kv_at = c.pos();
  uint64_t n_kv = c.read<uint64_t>("metadata count");
  // Each key/value takes at least 8 (key length) + 4 (type) + 1 bytes; each tensor info at least
  // 8 + 4 + 4 + 8 bytes (before its dimensions).
  if (n_kv > c.remaining() / 13)
    c.error_at(n_kv_at, "metadata count {} cannot fit in the {} bytes left", n_kv, c.remaining());
  if (n_tensors > c.remaining() / 24)
    c.error_at(n_tensors_at, "tensor count {} cannot fit in the {} bytes left", n_tensors, c.remaining());

  kv_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    uint64_t at = c.pos();
    std::string key = c.read_string("metadata key");
    if (key.empty()) c.error_at(at, "metadata key {} is empty", i);
    uint64_t type_at = c.pos();
    uint32_t raw_type = c.read<uint32_t>("metadata value type");
    check_value_type(c, type_at, raw_type);
    GgufValue value = read_value(c, raw_type, 0);
    if (kv_index_.count(key)) c.error_at(at, "duplicate metadata key '{}'", key);
    if (key == "general.alignment") {
      if (value.type() != GgufValueType::UINT32)
        c.error_at(type_at, "general.alignment has type {}, expected UINT32", gguf_value_type_name(value.type()));
      uint64_t al = std::get<uint32_t>(value.v);
      if (al == 0 || (al & (al - 1)) != 0) c.error_at(type_at, "general.alignment {} is not a power of two", al);
      alignment_ = al;
    }
    kv_index_.emplace(key, kv_.size());
    kv_.emplace_back(std::move(key), std::move(value));
  }

  std::vector<RawTensorInfo> raws;
  raws.reserve(n_tensors);
  std::vector<uint64_t> info_pos;
  info_pos.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const uint64_t at = c.pos();
    info_pos.push_back(at);
    RawTensorInfo t = read_tensor_info(c, i, alignment_);
    if (tensor_index_.count(t.info.name)) c.error_at(at, "duplicate tensor name '{}'", t.info.name);
    tensor_index_.emplace(t.info.name, raws.size());
    raws.push_back(std::move(t));
  }

  uint64_t end_of_infos = c.pos();
  uint64_t data = (end_of_infos + alignment_ - 1) / alignment_ * alignment_;
  if (data < end_of_infos) c.error_at(end_of_infos, "data offset overflows");
  const uint64_t data_size = size_ >= data ? size_ - data : 0;
  // Types first (a tensor's own problem is named before the file's missing data section).
  std::optional<int64_t> file_type;
  if (const GgufValue* ft = find("general.file_type")) {
    try {
      file_type = ft->as_int();
    } catch (const Error&) {
      // A file_type of another value type is no evidence; the model loader reports it if it matters.
    }
  }
  std::vector<const IkInterleavedForm*> interleaved;
  type_id_space_ = resolve_tensor_types(c, raws, file_type, data_size, interleaved);
  if (n_tensors > 0 && data > size_)
    c.error_at(end_of_infos, "data section would start at byte {} but the file has {} bytes", data, size_);
  data_offset_ = data;
  tensors_.reserve(raws.size());
  for (auto& r : raws) tensors_.push_back(std::move(r.info));
  check_tensor_extents(c, tensors_, info_pos, data_size);
  for (auto& t : tensors_) t.data = base_ + data_offset_ + t.offset;
  // ik_llama.cpp's row-interleaved tensors, rearranged into their base type's rows (in memory: the
  // file's pages of them are not read again).
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (!interleaved[i]) continue;
    GgufTensorInfo& t = tensors_[i];
    t.n_bytes = static_cast<uint64_t>(t.n_rows() * ggml_row_bytes(t.type, t.ne[0]));
    std::vector<uint8_t>& buf = converted_.emplace_back(static_cast<size_t>(t.n_bytes));
    deinterleave_rows(*interleaved[i], t.data, t.n_rows(), t.ne[0], buf.data());
    t.data = buf.data();
    t.converted = true;
  }
  n_own_tensors_ = tensors_.size();
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(std::string(key));
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufValue& GgufFile::require(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) fail("gguf: {}: missing required key '{}'", path_, key);
  return *v;
}

namespace {
template <typename F>
decltype(auto) typed(const GgufFile& f, std::string_view key, const GgufValue& v, F&& get) {
  try {
    return get(v);
  } catch (const Error& e) {
    fail("gguf: {}: key '{}': {}", f.path(), key, e.what());
  }
}
}  // namespace

int64_t GgufFile::get_int(std::string_view key) const {
  return typed(*this, key, require(key), [](const GgufValue& v) { return v.as_int(); });
}
uint64_t GgufFile::get_uint(std::string_view key) const {
  return typed(*this, key, require(key), [](const GgufValue& v) { return v.as_uint(); });
}
double GgufFile::get_float(std::string_view key) const {
  return typed(*this, key, require(key), [](const GgufValue& v) { return v.as_float(); });
}
bool GgufFile::get_bool(std::string_view key) const {
  return typed(*this, key, require(key), [](const GgufValue& v) { return v.as_bool(); });
}
const std::string& GgufFile::get_string(std::string_view key) const {
  return typed(*this, key, require(key), [](const GgufValue& v) -> const std::string& { return v.as_string(); });
}
const GgufArray& GgufFile::get_array(std::string_view key) const {
  return typed(*this, key, require(key), [](const GgufValue& v) -> const GgufArray& { return v.as_array(); });
}

std::vector<std::string> GgufFile::get_strings(std::string_view key) const {
  const GgufArray& a = get_array(key);
  std::vector<std::string> out;
  out.reserve(a.items.size());
  for (const auto& it : a.items) out.push_back(typed(*this, key, it, [](const GgufValue& v) { return v.as_string(); }));
  return out;
}
std::vector<float> GgufFile::get_floats(std::string_view key) const {
  const GgufArray& a = get_array(key);
  std::vector<float> out;
  out.reserve(a.items.size());
  for (const auto& it : a.items)
    out.push_back(static_cast<float>(typed(*this, key, it, [](const GgufValue& v) { return v.as_float(); })));
  return out;
}
std::vector<int64_t> GgufFile::get_ints(std::string_view key) const {
  const GgufArray& a = get_array(key);
  std::vector<int64_t> out;
  out.reserve(a.items.size());
  for (const auto& it : a.items) out.push_back(typed(*this, key, it, [](const GgufValue& v) { return v.as_int(); }));
  return out;
}

std::optional<int64_t> GgufFile::opt_int(std::string_view key) const {
  return has(key) ? std::optional(get_int(key)) : std::nullopt;
}
std::optional<uint64_t> GgufFile::opt_uint(std::string_view key) const {
  return has(key) ? std::optional(get_uint(key)) : std::nullopt;
}
std::optional<double> GgufFile::opt_float(std::string_view key) const {
  return has(key) ? std::optional(get_float(key)) : std::nullopt;
}
std::optional<bool> GgufFile::opt_bool(std::string_view key) const {
  return has(key) ? std::optional(get_bool(key)) : std::nullopt;
}
std::optional<std::string> GgufFile::opt_string(std::string_view key) const {
  return has(key) ? std::optional(get_string(key)) : std::nullopt;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufFile::require_tensor(std::string_view name) const {
  const GgufTensorInfo* t = find_tensor(name);
  if (!t) fail("gguf: {}: missing required tensor '{}'", path_, name);
  return *t;
}

}  // namespace mla
