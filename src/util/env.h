#pragma once
// Every MLA_* environment variable the project reads, in one table (and the test suite's in a
// second): documented, the product's printed by `--help-env`, and checked at start-up so that a misspelt name is
// reported (with the closest known one) instead of silently ignored.
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mla {

struct EnvVarInfo {
  std::string_view name;    // "MLA_TRACE"
  std::string_view values;  // what it takes: "dispatch:N"
  std::string_view help;    // one line
};

// The product's variables, as `--help-env` prints them.
std::span<const EnvVarInfo> env_vars();
// The test suite's (MLA_BIN, MLA_FUZZ_*, ...): known names, so not reported as unknown, but not in
// `--help-env`; env_value does not read them.
std::span<const EnvVarInfo> test_env_vars();

// The value of a variable from the table (nullopt when unset). Reading a name that is not in the
// table is a programming error (asserted), so every variable stays documented.
std::optional<std::string> env_value(std::string_view name);

// The table as `--help-env` prints it.
std::string env_help_text();

// The known name closest to `name` (edit distance), for "did you mean" messages.
std::string_view closest_env_var(std::string_view name);

// What replaced a variable that earlier releases read ("" for any other name), so that the
// start-up warning can say it instead of a near name.
std::string_view removed_env_var_replacement(std::string_view name);

// MLA_* names in `environ` (a null-terminated NAME=VALUE array) that are not in the table.
std::vector<std::string> unknown_env_vars(char** environ);
// Logs one warning per unknown MLA_* variable of this process, naming the closest known one.
void warn_unknown_env_vars();

}  // namespace mla
