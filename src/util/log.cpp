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

}  // namespace

spdlog::logger& log() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::stderr_color_mt("mla");
    l->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ [%t] %v");
    l->set_level(spdlog::level::info);
    l->flush_on(spdlog::level::info);
    if (auto env = env_value("MLA_LOG_LEVEL")) {
      if (auto lvl = parse_level(*env))
        l->set_level(*lvl);
      else
        l->warn("MLA_LOG_LEVEL: unknown level '{}' (expected {}); using info", *env, kLevels);
    }
    return l;
  }();
  return *logger;
}

void set_log_level(std::string_view level) {
  auto lvl = parse_level(level);
  if (!lvl) fail("unknown log level '{}' (expected {})", level, kLevels);
  log().set_level(*lvl);
}

}  // namespace mla
