#pragma once
// What the serving subcommands (mla run, serve, bench, doctor) share besides the engine flags
// (engine_args.h): --log-level, --trace, --dsa and --help-env, applied the same way, and the
// parsing of option values they have in common.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace mla::cli {

struct CommonOptions {
  std::string log_level;   // "" → MLA_LOG_LEVEL or info
  std::string trace;       // "" → MLA_TRACE
  std::string dsa = "on";  // --dsa on|off: sparse attention where the model has a DSA indexer
};

// --dsa as a bool; throws mla::Error for anything but on|off.
bool dsa_enabled(const CommonOptions& opt);

// Adds --log-level, --trace, --dsa and --help-env (prints the MLA_* table and exits 0) to cmd.
void add_common_options(CLI::App* cmd, CommonOptions& opt);
// At the start of the callback: log level, trace switches, warnings for unknown MLA_* names.
void apply_common_options(const CommonOptions& opt);

// "4096", "512M", "2G", "1.5GiB" → bytes (K/M/G/T are powers of 1024, an optional "iB"/"B").
// Throws mla::Error naming the option.
int64_t parse_byte_size(const std::string& text, const char* option);

// A whole file's bytes; throws mla::Error "cannot read OPTION 'PATH'".
std::string read_text_file(const std::string& path, const char* option);

}  // namespace mla::cli
