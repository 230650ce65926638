// libFuzzer: arbitrary bytes as a request body to the API's request parsers only
// (RequestParserHarness in fuzz/request_harness.h): JSON parse, the endpoint's parser and
// validation, no chat template and no SSE writer on accepted bodies, so every input is spent on the
// parsers (fuzz_request adds the rest of the request side). The first byte picks the endpoint, the
// rest is the body. Seeds: tests/fixtures/request-seeds/.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "request_harness.h"

namespace {
mla::fuzz::RequestParserHarness* harness = nullptr;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  harness = new mla::fuzz::RequestParserHarness();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string broken = harness->run(data, size);
  if (!broken.empty()) {
    std::fprintf(stderr, "request parser: %s\n", broken.c_str());
    std::abort();
  }
  return 0;
}
