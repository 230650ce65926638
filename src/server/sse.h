#pragma once
// Server-Sent Events framing for streamed responses: one `data: <json>\n\n` event per chunk,
// then `data: [DONE]\n\n`. JSON is dumped on one line (strings escape their newlines), and
// invalid UTF-8 is replaced, never thrown on.
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace mla::server {

inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// Compact JSON; invalid UTF-8 in strings becomes U+FFFD instead of an exception.
std::string dump_json(const nlohmann::ordered_json& j);
// "data: " + dump_json(j) + "\n\n".
std::string sse_event(const nlohmann::ordered_json& j);

}  // namespace mla::server
