#pragma once
// A bound on how deeply JSON the server reads may nest. The JSON library parses iteratively but
// recurses once per level when it copies, converts or prints a value (a chat template's context,
// the SSE writer, tool-call arguments), so without a bound a 64 KiB request of brackets, or a
// model output of them, would overflow a server thread's stack.
#include <string_view>

namespace mla::server {

// The deepest nesting of arrays and objects accepted in a request body, or in JSON text read
// from a request or an output (tool-call arguments).
inline constexpr int kMaxJsonDepth = 128;

// The nesting depth of JSON text (brackets outside strings), counted up to limit + 1.
int json_nesting_depth(std::string_view text, int limit = kMaxJsonDepth);

// json_nesting_depth(text) <= kMaxJsonDepth.
inline bool json_depth_ok(std::string_view text) { return json_nesting_depth(text) <= kMaxJsonDepth; }

}  // namespace mla::server
