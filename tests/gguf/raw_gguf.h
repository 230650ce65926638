#pragma once
// Byte-level builder for hand-crafted GGUF files in tests (the fields a writer would refuse).
#include <cstdint>
#include <string>
#include <vector>

namespace mla::test {

struct RawGguf {
  std::vector<uint8_t> b;
  template <typename T>
  RawGguf& put(T x) {
    const auto* p = reinterpret_cast<const uint8_t*>(&x);
    b.insert(b.end(), p, p + sizeof(T));
    return *this;
  }
  RawGguf& str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  // Magic "GGUF", version 3, the tensor and key counts.
  RawGguf& header(uint64_t n_tensors, uint64_t n_kv) {
    return put<uint32_t>(0x46554747).put<uint32_t>(3).put<uint64_t>(n_tensors).put<uint64_t>(n_kv);
  }
};

}  // namespace mla::test
