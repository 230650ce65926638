// libFuzzer: arbitrary bytes as a request body to the API's request side (fuzz/request_harness.h):
// the first byte picks the endpoint, the rest is the body. Seeds: tests/fixtures/request-seeds/.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "request_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static mla::fuzz::RequestHarness harness;
  std::string broken = harness.run(data, size);
  if (!broken.empty()) {
    std::fprintf(stderr, "request harness: %s\n", broken.c_str());
    std::abort();
  }
  return 0;
}
