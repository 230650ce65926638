#include "util/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>

#include "util/env.h"
#include "util/error.h"

namespace mla {
namespace {

constexpr const char* kLevels = "trace, debug, info, warn, error, critical or off";

std::optional<spdlog::level::level_enum> parse_level(std::string_view s) {
  static const char* kNames[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};
  for (const char* n : kNames)
    if (s == n) return spdlog::level::from_str(n);
  return std::nullopt;
}

// MLA_LOG_LEVEL, or info where it is unset or unknown (warned about when `warn`).
void apply_env_level(spdlog::logger& l, bool warn) {
  l.set_level(spdlog::level::info);
  if (auto env = env_value("MLA_LOG_LEVEL")) {
    if (auto lvl = parse_level(*env))
      l.set_level(*lvl);
    else if (warn)
      l.warn("MLA_LOG_LEVEL: unknown level '{}' (expected {}); using info", *env, kLevels);
  }
}

}  // namespace

spdlog::logger& log() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::stderr_color_mt("mla");
    l->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ [%t] %v");
    l->flush_on(spdlog::level::info);
    apply_env_level(*l, true);
    return l;
  }();
  return *logger;
}

void reset_log_level_from_env() { apply_env_level(log(), false); }

void set_log_level(std::string_view level) {
  auto lvl = parse_level(level);
  if (!lvl) fail("unknown log level '{}' (expected {})", level, kLevels);
  log().set_level(*lvl);
}

}  // namespace mla
