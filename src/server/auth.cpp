#include "server/auth.h"

#include <cstddef>

namespace mla::server {

bool constant_time_equals(std::string_view a, std::string_view b) {
  // Walk the whole of b (the key) whatever a is; fold every difference into one value.
  size_t diff = a.size() ^ b.size();
  for (size_t i = 0; i < b.size(); ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    diff |= static_cast<size_t>(x ^ static_cast<unsigned char>(b[i]));
  }
  // Through a volatile so the compiler cannot turn the loop into an early-exit comparison.
  volatile size_t result = diff;
  return result == 0;
}

bool authorized(std::string_view header, std::string_view api_key) {
  if (api_key.empty()) return true;
  constexpr std::string_view kScheme = "bearer ";
  if (header.size() < kScheme.size()) return false;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    char c = header[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != kScheme[i]) return false;
  }
  std::string_view token = header.substr(kScheme.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
  return constant_time_equals(token, api_key);
}

}  // namespace mla::server
