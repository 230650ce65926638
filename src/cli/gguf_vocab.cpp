// mla gguf vocab-from-hf DIR_OR_TOKENIZER_JSON -o FILE.gguf: a vocab-only GGUF (no tensors)
// from a HF byte-level BPE tokenizer, with the tokenizer keys llama.cpp's converter writes.
#include <fmt/format.h>

#include <filesystem>

#include "cli/commands.h"
#include "gguf/gguf.h"
#include "tokenizer/hf_vocab.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace mla::cli {

void register_gguf_vocab_from_hf(CLI::App& gguf) {
  auto* cmd = gguf.add_subcommand("vocab-from-hf",
                                   "Write a vocab-only GGUF from a HF tokenizer.json (+ tokenizer_config.json)");
  static std::string input, output, pre, name;
  cmd->add_option("input", input, "Directory holding tokenizer.json, or the tokenizer.json file")->required();
  cmd->add_option("-o,--output", output, "GGUF file to write")->required();
  cmd->add_option("--pre", pre, "tokenizer.ggml.pre to write (default: detected from the pre_tokenizer regexes)");
  cmd->add_option("--name", name, "general.name (default: the input directory's name)");
  cmd->callback([] {
    GgufWriter w;
    namespace fs = std::filesystem;
    fs::path dir = fs::is_directory(input) ? fs::path(input) : fs::path(input).parent_path();
    std::string gname = !name.empty() ? name : fs::absolute(dir).lexically_normal().filename().string();
    if (!gname.empty()) w.set("general.name", GgufValue::str(gname));
    HfVocabOptions opt;
    opt.pre = pre;
    HfVocabSummary s = hf_vocab_to_gguf(input, opt, w);
    // Check that the result loads before reporting success.
    auto bytes = w.to_bytes();
    auto f = GgufFile::parse(bytes.data(), bytes.size(), output);
    Tokenizer::from_gguf(*f);
    w.write(output);
    fmt::print("wrote {}: pre '{}', {} tokens ({} control, {} user-defined, {} unused), {} merges{}\n", output, s.pre,
               s.n_tokens, s.n_control, s.n_user_defined, s.n_unused, s.n_merges,
               s.warnings.empty() ? "" : fmt::format(", {} warnings", s.warnings.size()));
  });
}

}  // namespace mla::cli
