#pragma once
// One exception type for load, config and request errors: a readable one-line message that
// says what was wrong, where, and (when it applies) expected vs actual.
#include <fmt/format.h>
#include <stdexcept>
#include <string>

namespace mla {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

// The engine can no longer compute anything (a worker rank of a multi-process run is gone): the
// requests it fails are answered 503, not 500.
class UnavailableError : public Error {
 public:
  using Error::Error;
};

template <typename... Args>
[[noreturn]] inline void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace mla
