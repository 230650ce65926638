#pragma once
// The single log sink. Every thread (and, later, every worker process) logs through
// mla::log(), an spdlog logger writing to stderr; the level comes from --log-level or
// MLA_LOG_LEVEL ("trace|debug|info|warn|error|off").
#include <spdlog/spdlog.h>

#include <string_view>

namespace mla {

spdlog::logger& log();
// Throws mla::Error on an unknown level name.
void set_log_level(std::string_view level);

}  // namespace mla
