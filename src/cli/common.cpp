#include "cli/common.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "util/env.h"
#include "util/error.h"
#include "util/log.h"
#include "util/trace.h"

namespace mla::cli {

void add_common_options(CLI::App* cmd, CommonOptions& opt) {
  cmd->add_option("--log-level", opt.log_level,
                  "trace | debug | info | warn | error | critical | off (default: $MLA_LOG_LEVEL or info)");
  cmd->add_option("--trace", opt.trace, "Trace switches, e.g. dispatch:8 or tiers:8 (default: $MLA_TRACE)");
  cmd->add_option("--dsa", opt.dsa,
                  "on | off: DeepSeek Sparse Attention for models with a lightning indexer (deepseek32, glm-dsa); "
                  "off runs dense MLA (default: on)");
  cmd->add_flag_callback(
      "--help-env",
      [] {
        std::fputs(env_help_text().c_str(), stdout);
        throw CLI::Success();
      },
      "Print the MLA_* environment variables and exit");
}

void apply_common_options(const CommonOptions& opt) {
  if (!opt.log_level.empty()) set_log_level(opt.log_level);
  warn_unknown_env_vars();
  if (opt.trace.empty())
    trace_configure_from_env();
  else
    trace_configure(opt.trace);
}

bool dsa_enabled(const CommonOptions& opt) {
  if (opt.dsa == "on") return true;
  if (opt.dsa == "off") return false;
  fail("--dsa '{}': expected on or off", opt.dsa);
}

int64_t parse_byte_size(const std::string& text, const char* option) {
  size_t at = 0;
  double value = 0;
  try {
    value = std::stod(text, &at);
  } catch (const std::exception&) {
    fail("{}: '{}' is not a size (expected e.g. 4096, 512M, 2G)", option, text);
  }
  std::string unit = text.substr(at);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.ends_with("IB"))
    unit.resize(unit.size() - 2);
  else if (unit.ends_with("B"))
    unit.resize(unit.size() - 1);
  double scale = 1;
  if (unit == "K")
    scale = 1024.0;
  else if (unit == "M")
    scale = 1024.0 * 1024;
  else if (unit == "G")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "T")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else if (!unit.empty())
    fail("{}: unknown unit in '{}' (expected K, M, G or T)", option, text);
  const double bytes = value * scale;
  if (!std::isfinite(bytes) || bytes < 1 || bytes > 9.0e18) fail("{}: '{}' is out of range", option, text);
  return static_cast<int64_t>(bytes);
}

std::string read_text_file(const std::string& path, const char* option) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read {} '{}'", option, path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace mla::cli
