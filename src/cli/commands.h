#pragma once
// Subcommand registration. Each register_* adds one subcommand (with its options and callback)
// to the app; callbacks throw mla::Error for user-facing failures and may set exit_code().
#include <CLI/CLI.hpp>

namespace mla::cli {

int& exit_code();

void register_version(CLI::App& app);
void register_gguf(CLI::App& app);  // mla gguf inspect|...
// mla gguf dequant (src/cli/gguf_dequant.cpp)
void register_gguf_dequant(CLI::App& gguf);
// mla gguf quantize-test-file | quant-roundtrip (src/cli/gguf_quant_test.cpp)
void register_gguf_quant_test(CLI::App& gguf);
// mla gguf vocab-from-hf (src/cli/gguf_vocab.cpp)
void register_gguf_vocab_from_hf(CLI::App& gguf);
// mla tokenize (src/cli/tokenize_cmd.cpp)
void register_tokenize(CLI::App& app);
// mla template render (src/cli/template_cmd.cpp)
void register_template(CLI::App& app);
void register_gguf_synth(CLI::App& gguf);               // mla gguf synth (gguf_synth.cpp)
void register_gguf_convert_mla_layout(CLI::App& gguf);  // mla gguf convert-mla-layout (gguf_synth.cpp)
void register_run(CLI::App& app);                       // mla run (run.cpp)
void register_serve(CLI::App& app);                     // mla serve (serve_cmd.cpp)
void register_perplexity(CLI::App& app);                // mla perplexity (perplexity_cmd.cpp)
void register_gguf_quantize(CLI::App& gguf);            // mla gguf quantize (gguf_quantize.cpp)
void register_doctor(CLI::App& app);                    // mla doctor (doctor_cmd.cpp)
void register_gguf_split(CLI::App& gguf);               // mla gguf split|merge (gguf_split_cmd.cpp)
void register_bench(CLI::App& app);                     // mla bench (bench_cmd.cpp)

}  // namespace mla::cli
