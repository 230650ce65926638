// mla gguf split [--split-max-size N(M|G) | --split-max-tensors N] [--no-tensor-first-split]
//     [--dry-run] IN OUT_PREFIX   → OUT_PREFIX-00001-of-0000N.gguf ...
// mla gguf merge SHARD OUT        → one file
// Both write what llama.cpp's llama-gguf-split writes for the same options, byte for byte.
#include <fmt/format.h>

#include <optional>

#include "cli/commands.h"
#include "gguf/gguf.h"
#include "gguf/gguf_split.h"
#include "util/error.h"

namespace mla::cli {
namespace {

struct SplitArgs {
  std::string in, prefix, max_size;
  std::optional<int> max_tensors;
  bool no_tensor_first_split = false, dry_run = false;
};

void split_file(const SplitArgs& a) {
  if (!a.max_size.empty() && a.max_tensors) fail("gguf split: give --split-max-size or --split-max-tensors, not both");
  GgufSplitOptions o;
  if (!a.max_size.empty()) o.max_bytes = parse_split_size(a.max_size);
  if (a.max_tensors) o.max_tensors = *a.max_tensors;
  o.no_tensor_first_split = a.no_tensor_first_split;
  auto f = GgufFile::open(a.in);
  auto plan = gguf_split_plan(*f, o);
  fmt::print("{}: {} tensors -> {} shards\n", f->path(), f->tensors().size(), plan.size());
  for (size_t s = 0; s < plan.size(); ++s) {
    uint64_t bytes = 0;
    for (size_t i : plan[s]) bytes += f->tensors()[i].n_bytes;
    fmt::print("  {}: {} tensors, {} tensor bytes\n",
               gguf_split_path(a.prefix, static_cast<int>(s), static_cast<int>(plan.size())), plan[s].size(), bytes);
  }
  if (a.dry_run) return;
  for (const auto& p : gguf_split_write(*f, a.prefix, o)) fmt::print("wrote {}\n", p);
}

}  // namespace

void register_gguf_split(CLI::App& gguf) {
  auto* split =
      gguf.add_subcommand("split", "Split a GGUF into PREFIX-00001-of-0000N.gguf shards (as llama-gguf-split)");
  static SplitArgs a;
  split->add_option("input", a.in, "Input GGUF")->required();
  split->add_option("output_prefix", a.prefix, "Shards are written as PREFIX-%05d-of-%05d.gguf")->required();
  split->add_option("--split-max-size", a.max_size, "Largest tensor bytes per shard: N followed by M or G (decimal)");
  split->add_option("--split-max-tensors", a.max_tensors, "Most tensors per shard (default 128)");
  split->add_flag("--no-tensor-first-split", a.no_tensor_first_split, "Shard 1 holds metadata only");
  split->add_flag("--dry-run", a.dry_run, "Print the plan; write nothing");
  split->callback([] { split_file(a); });

  auto* merge =
      gguf.add_subcommand("merge", "Merge a split GGUF (any shard's name) into one file (as llama-gguf-split --merge)");
  static std::string shard, out;
  merge->add_option("shard", shard, "Any shard of the split model")->required();
  merge->add_option("output", out, "Output GGUF (must not exist)")->required();
  merge->callback([] {
    auto f = GgufFile::open(shard);
    gguf_merge_write(*f, out);
    fmt::print("wrote {} ({} shards, {} tensors)\n", out, f->shards().size(), f->tensors().size());
  });
}

}  // namespace mla::cli
