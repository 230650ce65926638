#include "util/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "util/error.h"

namespace mla {

spdlog::logger& log() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::stderr_color_mt("mla");
    l->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ [%t] %v");
    l->set_level(spdlog::level::info);
    if (const char* env = std::getenv("MLA_LOG_LEVEL")) {
      auto lvl = spdlog::level::from_str(env);
      l->set_level(lvl);
    }
    l->flush_on(spdlog::level::info);
    return l;
  }();
  return *logger;
}

void set_log_level(std::string_view level) {
  static const char* kNames[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};
  for (const char* n : kNames) {
    if (level == n) {
      log().set_level(spdlog::level::from_str(std::string(level)));
      return;
    }
  }
  fail("unknown log level '{}' (expected trace, debug, info, warn, error, critical or off)", level);
}

}  // namespace mla
