#pragma once
// What the serving subcommands (mla run, serve, bench) share: --log-level, --trace, --dsa and
// --help-env, applied the same way, and the parsing of option values they have in common.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace mla {
struct ModelOptions;
}

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

// --speculative-config: K from its JSON text (0: empty, speculation off). Where the model's MTP
// layer is needed (K > 0, or need_mtp: run's --mtp-logits) the run must be a single process; then
// mo.mtp is set and mo.max_batch_tokens widened by max_num_seqs (the MTP pass carries up to one row
// more per sequence). Throws mla::Error: a bad config, or "WHAT runs in a single process only".
int apply_speculative_config(const std::string& config, bool need_mtp, int max_num_seqs, std::string_view what,
                             ModelOptions& mo);

// A whole file's bytes; throws mla::Error "cannot read OPTION 'PATH'".
std::string read_text_file(const std::string& path, const char* option);

}  // namespace mla::cli
