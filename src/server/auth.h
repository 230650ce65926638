#pragma once
// API key check: "Authorization: Bearer <key>", compared in constant time.
#include <string_view>

namespace mla::server {

// True when a == b. The time taken depends on the lengths only, never on where the bytes
// differ, so a client cannot find the key byte by byte from response times.
bool constant_time_equals(std::string_view a, std::string_view b);

// True when the Authorization header value carries the key ("Bearer <key>", scheme
// case-insensitive). An empty key accepts everything.
bool authorized(std::string_view authorization_header, std::string_view api_key);

}  // namespace mla::server
