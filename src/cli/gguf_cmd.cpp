// mla gguf inspect FILE [--json] [--full]: metadata, tensors and totals of a GGUF file (of every
// shard of a split model, opened by any shard's name).
#include <fmt/format.h>

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "model/deepseek4_config.h"
#include "util/error.h"

namespace mla::cli {
namespace {

std::string type_label(const GgufValue& v) {
  if (v.type() != GgufValueType::ARRAY) return std::string(gguf_value_type_name(v.type()));
  const auto& a = v.as_array();
  return fmt::format("ARRAY[{}, {}]", gguf_value_type_name(a.elem_type), a.items.size());
}

nlohmann::json to_json(const GgufValue& v, size_t max_items) {
  return std::visit(
      [&](const auto& x) -> nlohmann::json {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, GgufArray>) {
          nlohmann::json arr = nlohmann::json::array();
          size_t shown = std::min(max_items, x.items.size());
          for (size_t i = 0; i < shown; ++i) arr.push_back(to_json(x.items[i], max_items));
          return arr;
        } else if constexpr (std::is_same_v<T, uint8_t> || std::is_same_v<T, uint16_t> || std::is_same_v<T, uint32_t> ||
                             std::is_same_v<T, uint64_t>) {
          return static_cast<uint64_t>(x);
        } else if constexpr (std::is_same_v<T, int8_t> || std::is_same_v<T, int16_t> || std::is_same_v<T, int32_t> ||
                             std::is_same_v<T, int64_t>) {
          return static_cast<int64_t>(x);
        } else {
          return x;
        }
      },
      v.v);
}

struct Totals {
  int64_t params = 0;
  uint64_t bytes = 0;
  std::map<std::string, int> by_type;
};

Totals totals_of(const GgufFile& f) {
  Totals t;
  for (const auto& ti : f.tensors()) {
    t.params += ti.n_elements;
    t.bytes += ti.n_bytes;
    t.by_type[std::string(ggml_type_name(ti.type))]++;
  }
  return t;
}

void print_text(const GgufFile& f, bool full) {
  size_t max_items = full ? SIZE_MAX : 8;
  fmt::print("file: {}\n", f.path());
  fmt::print("gguf version {}, alignment {}, data at byte {}, file size {} bytes\n", f.version(), f.alignment(),
             f.data_offset(), f.file_size());
  const auto shards = f.shards();
  if (shards.size() > 1) {
    uint64_t total = 0;
    for (const auto& sh : shards) total += sh.file_size;
    fmt::print("\nshards ({}, {} bytes in all; metadata from shard 1):\n", shards.size(), total);
    fmt::print("  {:>5}  {:<60} {:>14} {:>8}\n", "#", "file", "bytes", "tensors");
    for (size_t i = 0; i < shards.size(); ++i)
      fmt::print("  {:>5}  {:<60} {:>14} {:>8}\n", i + 1, shards[i].path, shards[i].file_size, shards[i].n_tensors);
  }
  fmt::print("\nmetadata ({} keys):\n", f.metadata().size());
  for (const auto& [k, v] : f.metadata())
    fmt::print("  {:<48} {:<22} = {}\n", k, type_label(v), v.to_string(max_items));
  fmt::print("\ntensors ({}):\n", f.tensors().size());
  // Split models get a shard column (1-based); offsets are within that shard's data section.
  const bool split = shards.size() > 1;
  fmt::print("  {:>5}  {:<40} {:<8} {:<24} {:>14} {:>14}{}\n", "#", "name", "type", "shape (ne)", "offset", "bytes",
             split ? "  shard" : "");
  size_t i = 0;
  for (const auto& t : f.tensors())
    fmt::print("  {:>5}  {:<40} {:<8} {:<24} {:>14} {:>14}{}\n", i++, t.name, ggml_type_name(t.type), t.shape_string(),
               t.offset, t.n_bytes, split ? fmt::format("  {:>5}", t.shard + 1) : "");
  Totals tot = totals_of(f);
  fmt::print("\ntotals: {} tensors, {} parameters ({:.3f} M), {} bytes ({:.2f} MiB), {:.3f} bits per weight\n",
             f.tensors().size(), tot.params, tot.params / 1e6, tot.bytes, tot.bytes / 1048576.0,
             tot.params ? tot.bytes * 8.0 / static_cast<double>(tot.params) : 0.0);
  std::string types;
  for (const auto& [name, n] : tot.by_type) types += fmt::format("{}{}: {}", types.empty() ? "" : ", ", name, n);
  if (!types.empty()) fmt::print("tensor types: {}\n", types);
  if (const GgufValue* arch = f.find("general.architecture");
      arch && arch->type() == GgufValueType::STRING &&
      (arch->as_string() == "deepseek2" || arch->as_string() == "deepseek32" || arch->as_string() == "glm-dsa")) {
    try {
      fmt::print("\nderived hyper-parameters ({}):\n{}", arch->as_string(),
                 describe_deepseek_config(load_deepseek_config(f)));
    } catch (const Error& e) {
      fmt::print("\nderived hyper-parameters ({}): not loadable: {}\n", arch->as_string(), e.what());
    }
  } else if (arch && arch->type() == GgufValueType::STRING && arch->as_string() == "deepseek4") {
    try {
      fmt::print("\nderived hyper-parameters (deepseek4):\n{}", describe_deepseek4_config(load_deepseek4_config(f)));
    } catch (const Error& e) {
      fmt::print("\nderived hyper-parameters (deepseek4): not loadable: {}\n", e.what());
    }
  }
}

void print_json(const GgufFile& f, bool full) {
  size_t max_items = full ? SIZE_MAX : 8;
  nlohmann::json j;
  j["file"] = f.path();
  j["version"] = f.version();
  j["alignment"] = f.alignment();
  j["data_offset"] = f.data_offset();
  j["file_size"] = f.file_size();
  nlohmann::json shards = nlohmann::json::array();
  for (const auto& sh : f.shards())
    shards.push_back(
        {{"file", sh.path}, {"bytes", sh.file_size}, {"data_offset", sh.data_offset}, {"tensors", sh.n_tensors}});
  j["shards"] = std::move(shards);  // one entry for a single file
  nlohmann::json md = nlohmann::json::array();
  for (const auto& [k, v] : f.metadata()) {
    nlohmann::json e{{"key", k}, {"type", std::string(gguf_value_type_name(v.type()))}};
    if (v.type() == GgufValueType::ARRAY) {
      const auto& a = v.as_array();
      e["elem_type"] = std::string(gguf_value_type_name(a.elem_type));
      e["count"] = a.items.size();
      e["truncated"] = a.items.size() > max_items;
    }
    e["value"] = to_json(v, max_items);
    md.push_back(std::move(e));
  }
  j["metadata"] = std::move(md);
  nlohmann::json ts = nlohmann::json::array();
  for (const auto& t : f.tensors())
    ts.push_back({{"name", t.name},
                  {"type", std::string(ggml_type_name(t.type))},
                  {"ne", t.ne},
                  {"offset", t.offset},
                  {"bytes", t.n_bytes},
                  {"n_elements", t.n_elements},
                  {"shard", t.shard}});  // index into "shards"; offset is within that shard's data
  j["tensors"] = std::move(ts);
  Totals tot = totals_of(f);
  j["totals"] = {{"tensors", f.tensors().size()},
                 {"parameters", tot.params},
                 {"bytes", tot.bytes},
                 {"bits_per_weight", tot.params ? tot.bytes * 8.0 / static_cast<double>(tot.params) : 0.0}};
  // Strings in GGUF files need not be valid UTF-8: replace bad bytes rather than fail.
  std::string out = j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fputc('\n', stdout);
}

}  // namespace

void register_gguf(CLI::App& app) {
  auto* gguf = app.add_subcommand("gguf", "Inspect, synthesize and convert GGUF files");
  gguf->require_subcommand(1);

  auto* inspect = gguf->add_subcommand("inspect", "Print every metadata key, every tensor and totals");
  static std::string path;
  static bool json = false, full = false;
  inspect->add_option("file", path, "GGUF file")->required();
  inspect->add_flag("--json", json, "Machine-readable JSON output");
  inspect->add_flag("--full", full, "Do not abbreviate long arrays");
  inspect->callback([] {
    auto f = GgufFile::open(path);
    if (json)
      print_json(*f, full);
    else
      print_text(*f, full);
  });

  // Further `mla gguf X` subcommands register here (one file each: src/cli/gguf_X.cpp).
  register_gguf_dequant(*gguf);
  register_gguf_quant_test(*gguf);
  register_gguf_vocab_from_hf(*gguf);
  register_gguf_synth(*gguf);
  register_gguf_convert_mla_layout(*gguf);
  register_gguf_quantize(*gguf);
  register_gguf_split(*gguf);
}

}  // namespace mla::cli
