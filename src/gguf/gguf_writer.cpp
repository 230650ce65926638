// GGUF v3 writer: metadata of every type, tensors aligned at general.alignment.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "gguf/gguf.h"
#include "util/error.h"

namespace mla {
namespace {

class Out {
 public:
  // resize + memcpy rather than vector::insert: g++ 12 raises a false -Wstringop-overflow there.
  void put_raw(const void* p, size_t n) {
    size_t at = bytes.size();
    bytes.resize(at + n);
    if (n) std::memcpy(bytes.data() + at, p, n);
  }
  template <typename T>
  void put(T x) {
    put_raw(&x, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    put_raw(s.data(), s.size());
  }
  void pad_to(uint64_t alignment) {
    while (bytes.size() % alignment) bytes.push_back(0);
  }
  std::vector<uint8_t> bytes;
};

void put_value(Out& o, const GgufValue& v) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          o.put_string(x);
        } else if constexpr (std::is_same_v<T, GgufArray>) {
          o.put<uint32_t>(static_cast<uint32_t>(x.elem_type));
          o.put<uint64_t>(x.items.size());
          for (const auto& it : x.items) {
            if (it.type() != x.elem_type)
              fail("gguf writer: array declared {} holds a {} item", gguf_value_type_name(x.elem_type),
                   gguf_value_type_name(it.type()));
            put_value(o, it);
          }
        } else if constexpr (std::is_same_v<T, bool>) {
          o.put<uint8_t>(x ? 1 : 0);
        } else {
          o.put<T>(x);
        }
      },
      v.v);
}

}  // namespace

void GgufWriter::set(std::string key, GgufValue value) {
  for (auto& kv : kv_) {
    if (kv.first == key) {
      kv.second = std::move(value);
      return;
    }
  }
  kv_.emplace_back(std::move(key), std::move(value));
}

const GgufValue* GgufWriter::find(std::string_view key) const {
  for (const auto& kv : kv_)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

void GgufWriter::remove(std::string_view key) {
  std::erase_if(kv_, [&](const auto& kv) { return kv.first == key; });
}

void GgufWriter::check_tensor(const std::string& name, GgmlType type, const std::vector<int64_t>& ne,
                              size_t n_bytes) const {
  if (ne.empty() || ne.size() > 4)
    fail("gguf writer: tensor '{}' has {} dimensions (expected 1 to 4)", name, ne.size());
  const auto& tr = ggml_traits(type);
  if (tr.block_bytes == 0) fail("gguf writer: tensor '{}' has an unknown type", name);
  int64_t n = 1;
  for (int64_t d : ne) {
    if (d < 0) fail("gguf writer: tensor '{}' has a negative dimension", name);
    n *= d;
  }
  if (ne[0] % tr.block_elems != 0)
    fail("gguf writer: tensor '{}' row length {} is not a multiple of {}'s block size {}", name, ne[0], tr.name,
         tr.block_elems);
  const uint64_t want = ne[0] == 0 ? 0 : static_cast<uint64_t>(n / ne[0] * ggml_row_bytes(type, ne[0]));
  if (n_bytes != want)
    fail("gguf writer: tensor '{}' {} {} needs {} bytes, got {}", name, tr.name, ne.size(), want, n_bytes);
  for (const auto& t : tensors_)
    if (t.name == name) fail("gguf writer: duplicate tensor '{}'", name);
}

void GgufWriter::add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne, std::vector<uint8_t> data) {
  check_tensor(name, type, ne, data.size());
  size_t n_bytes = data.size();
  tensors_.push_back(Tensor{std::move(name), type, std::move(ne), std::move(data), nullptr, n_bytes});
}

void GgufWriter::add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne, const void* data,
                            size_t n_bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  add_tensor(std::move(name), type, std::move(ne), std::vector<uint8_t>(p, p + n_bytes));
}

void GgufWriter::add_tensor_ref(std::string name, GgmlType type, std::vector<int64_t> ne, const void* data,
                                size_t n_bytes) {
  check_tensor(name, type, ne, n_bytes);
  tensors_.push_back(Tensor{std::move(name), type, std::move(ne), {}, static_cast<const uint8_t*>(data), n_bytes});
}

void GgufWriter::add_tensor_lazy(std::string name, GgmlType type, std::vector<int64_t> ne, size_t n_bytes,
                                 std::function<std::vector<uint8_t>()> make) {
  check_tensor(name, type, ne, n_bytes);
  Tensor t{std::move(name), type, std::move(ne), {}, nullptr, n_bytes, std::move(make)};
  tensors_.push_back(std::move(t));
}

void GgufWriter::with_bytes(const Tensor& t, const std::function<void(const uint8_t*, size_t)>& emit) {
  if (!t.make) {
    emit(t.bytes(), t.n_bytes);
    return;
  }
  const std::vector<uint8_t> made = t.make();
  if (made.size() != t.n_bytes)
    fail("gguf writer: tensor '{}' was made with {} bytes, declared {}", t.name, made.size(), t.n_bytes);
  emit(made.data(), made.size());
}

void GgufWriter::copy_metadata_from(const GgufFile& f) {
  for (const auto& [k, v] : f.metadata())
    if (!is_gguf_split_key(k)) set(k, v);
}

uint64_t GgufWriter::alignment() const {
  uint64_t alignment = 32;
  if (const GgufValue* a = find("general.alignment")) {
    if (a->type() != GgufValueType::UINT32) fail("gguf writer: general.alignment must be UINT32");
    alignment = std::get<uint32_t>(a->v);
    if (alignment == 0 || (alignment & (alignment - 1))) fail("gguf writer: general.alignment must be a power of two");
  }
  return alignment;
}

std::vector<uint8_t> GgufWriter::header_bytes() const {
  uint64_t align = alignment();
  Out o;
  o.put<uint32_t>(0x46554747);
  o.put<uint32_t>(3);
  o.put<uint64_t>(tensors_.size());
  o.put<uint64_t>(kv_.size());
  for (const auto& [k, v] : kv_) {
    o.put_string(k);
    o.put<uint32_t>(static_cast<uint32_t>(v.type()));
    put_value(o, v);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    o.put_string(t.name);
    o.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) o.put<uint64_t>(static_cast<uint64_t>(d));
    o.put<uint32_t>(static_cast<uint32_t>(t.type));
    o.put<uint64_t>(offset);
    offset += (t.n_bytes + align - 1) / align * align;
  }
  o.pad_to(align);
  return o.bytes;
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
  uint64_t align = alignment();
  Out o;
  o.bytes = header_bytes();
  for (const auto& t : tensors_) {
    with_bytes(t, [&](const uint8_t* b, size_t n) { o.put_raw(b, n); });
    o.pad_to(align);
  }
  return o.bytes;
}

void GgufWriter::write(const std::string& path) const {
  uint64_t align = alignment();
  std::vector<uint8_t> header = header_bytes();
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) fail("gguf writer: cannot create '{}': {}", tmp, std::strerror(errno));
    f.write(reinterpret_cast<const char*>(header.data()), static_cast<std::streamsize>(header.size()));
    static const char kZeros[256] = {};
    for (const auto& t : tensors_) {
      with_bytes(t, [&](const uint8_t* b, size_t n) {
        f.write(reinterpret_cast<const char*>(b), static_cast<std::streamsize>(n));
      });
      uint64_t pad = (align - t.n_bytes % align) % align;
      while (pad > 0) {
        uint64_t n = std::min<uint64_t>(pad, sizeof(kZeros));
        f.write(kZeros, static_cast<std::streamsize>(n));
        pad -= n;
      }
    }
    f.flush();
    if (!f) {
      int e = errno;
      std::filesystem::remove(tmp);
      fail("gguf writer: write to '{}' failed: {}", tmp, std::strerror(e));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) fail("gguf writer: cannot rename '{}' to '{}': {}", tmp, path, ec.message());
}

}  // namespace mla
