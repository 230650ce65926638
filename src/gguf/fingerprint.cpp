#include <xxhash.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "gguf/gguf.h"
#include "util/error.h"

namespace mla {

uint64_t gguf_file_fingerprint(const GgufFile& f) {
  constexpr uint64_t kSample = 64 * 1024;
  std::ifstream in(f.path(), std::ios::binary);
  const uint64_t head = std::min(f.file_size(), f.data_offset() + kSample);
  const uint64_t tail_at = std::max(head, f.file_size() > kSample ? f.file_size() - kSample : 0);
  std::string bytes(head + (f.file_size() - tail_at), '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(head));
  in.seekg(static_cast<std::streamoff>(tail_at));
  in.read(bytes.data() + head, static_cast<std::streamsize>(f.file_size() - tail_at));
  if (!in) fail("cannot read '{}' back for its fingerprint", f.path());
  return XXH3_64bits(bytes.data(), bytes.size());
}

}  // namespace mla
