// libFuzzer entry point for the GGUF reader: any byte string must parse or throw mla::Error.
// On success, every metadata value and tensor view is touched so ASan sees any bad offset.
#include <cstddef>
#include <cstdint>

#include "gguf/gguf.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = mla::GgufFile::parse(data, size, "fuzz");
    size_t sink = 0;
    for (const auto& [k, v] : f->metadata()) sink += k.size() + v.to_string(4).size();
    for (const auto& t : f->tensors()) {
      if (t.n_bytes > 0) sink += t.data[0] + t.data[t.n_bytes - 1];
      sink += t.shape_string().size();
    }
    if (f->has("general.architecture")) {
      try {
        sink += f->get_string("general.architecture").size();
      } catch (const mla::Error&) {
      }
    }
    volatile size_t keep = sink;
    (void)keep;
  } catch (const mla::Error&) {
  }
  return 0;
}
