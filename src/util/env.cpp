#include "util/env.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cstdlib>

#include "util/log.h"

namespace mla {
namespace {

constexpr EnvVarInfo kEnvVars[] = {
    {"MLA_LOG_LEVEL", "trace|debug|info|warn|error|critical|off",
     "level of the single log sink (overridden by --log-level); default info"},
    {"MLA_TRACE", "dispatch:N,tiers:N",
     "trace switches (overridden by --trace): dispatch:N logs each layer's MLA path decision (deepseek4: "
     "its attention branch) for its first N forward calls; tiers:N the first N prefix lookups that "
     "reached the prefix cache's RAM or disk tier"},
    {"MLA_API_KEY", "KEY", "mla serve: require 'Authorization: Bearer KEY' (overridden by --api-key)"},
    {"MLA_PREFAULT", "0|1",
     "deprecated (logs a warning when set): use --no-prefault; 0 still leaves the model file's pages to "
     "first use"},
    {"MLA_SIMD", "avx2|scalar",
     "deprecated (logs a warning when set): use --simd avx2|scalar, the quant kernels' SIMD family; still "
     "read as it where --simd is not given"},
    {"MLA_REPACK", "0|1",
     "deprecated (logs a warning when set): use --no-repack; 0 still keeps the weights in the file's row "
     "layout (no 16-row copy for the packed GEMM)"},
};

// The test suite's variables (CONTRIBUTING.md lists them): known, so that no start-up warning calls
// them unknown when a test sets them, but not the product's and not printed by --help-env.
constexpr EnvVarInfo kTestEnvVars[] = {
    {"MLA_REFERENCE_DIR", "PATH", "directory of the reference logits fixtures (default tests/fixtures/reference)"},
    {"MLA_BIN", "PATH", "the mla binary the Python tests run (set by ctest)"},
    {"MLA_BUILD_DIR", "PATH", "the build directory (set by ctest)"},
    {"MLA_REQUEST_MUTATIONS", "N", "mutations of the request seeds in mla_tests RequestCorpus (default 3000)"},
    {"MLA_FUZZ_CASES", "N", "cases of the live-server request fuzzer, test_server_fuzz.py (default 400)"},
    {"MLA_FUZZ_SEED", "N", "the seed of test_server_fuzz.py's mutations"},
    {"MLA_SOAK_CLIENTS", "N", "clients of the short soak in test_server_faults.py (default 64)"},
    {"MLA_SOAK_SECONDS", "S", "seconds of the short soak in test_server_faults.py (default 20)"},
};

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

bool known(std::string_view name) {
  auto is = [&](const EnvVarInfo& v) { return v.name == name; };
  return std::any_of(std::begin(kEnvVars), std::end(kEnvVars), is) ||
         std::any_of(std::begin(kTestEnvVars), std::end(kTestEnvVars), is);
}

}  // namespace

std::span<const EnvVarInfo> env_vars() { return kEnvVars; }
std::span<const EnvVarInfo> test_env_vars() { return kTestEnvVars; }

std::optional<std::string> env_value(std::string_view name) {
  assert(std::any_of(std::begin(kEnvVars), std::end(kEnvVars), [&](const EnvVarInfo& v) { return v.name == name; }) &&
         "MLA_* variable missing from the table in util/env.cpp");
  const char* v = std::getenv(std::string(name).c_str());
  if (!v) return std::nullopt;
  return std::string(v);
}

std::string env_help_text() {
  size_t width = 0;
  for (const auto& v : kEnvVars) width = std::max(width, v.name.size());
  std::string out = "Environment variables (MLA_* names not listed here are reported at start-up):\n";
  for (const auto& v : kEnvVars)
    out += fmt::format("  {:<{}}  {}\n  {:<{}}  {}\n", v.name, width, v.values, "", width, v.help);
  return out;
}

std::string_view closest_env_var(std::string_view name) {
  std::string_view best;
  size_t best_d = SIZE_MAX;
  for (const auto& table : {env_vars(), test_env_vars()})
    for (const auto& v : table) {
      size_t d = edit_distance(name, v.name);
      if (d < best_d) {
        best_d = d;
        best = v.name;
      }
    }
  return best;
}

std::string_view removed_env_var_replacement(std::string_view name) {
  if (name == "MLA_EXACT_ATTENTION") return "--attention-precision exact|f32 (f32 is the default; the doctor: exact)";
  return {};
}

std::vector<std::string> unknown_env_vars(char** env) {
  std::vector<std::string> out;
  for (char** e = env; e && *e; ++e) {
    std::string_view entry(*e);
    if (!entry.starts_with("MLA_")) continue;
    std::string_view name = entry.substr(0, entry.find('='));
    if (!known(name)) out.emplace_back(name);
  }
  return out;
}

void warn_unknown_env_vars() {
  for (const auto& name : unknown_env_vars(environ)) {
    if (const std::string_view instead = removed_env_var_replacement(name); !instead.empty())
      log().warn("environment variable {} was removed and is ignored: use {}", name, instead);
    else
      log().warn("unknown environment variable {} is ignored (did you mean {}? see --help-env)", name,
                 closest_env_var(name));
  }
}

}  // namespace mla
