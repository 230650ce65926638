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
// The level MLA_LOG_LEVEL names again (info where unset or unknown, without a warning): for an MPI
// worker once it has adopted rank 0's environment (rank 0 warned about a bad name).
void reset_log_level_from_env();

}  // namespace mla
