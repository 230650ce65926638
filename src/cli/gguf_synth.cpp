// mla gguf synth: writes a random-weight deepseek2-family or deepseek4 GGUF from flags or a JSON config.
// mla gguf convert-mla-layout: copies a deepseek2 file with its MLA projections re-laid out.
#include <fmt/format.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "model/synth.h"
#include "util/error.h"

namespace mla::cli {
namespace {

std::string flag_of(const std::string& key) {
  std::string f = "--" + key;
  for (auto& ch : f)
    if (ch == '_') ch = '-';
  return f;
}

// "attn_q=q8_0,ffn_exps=q4_k" -> {"attn_q": "q8_0", "ffn_exps": "q4_k"}
nlohmann::json parse_types(const std::string& v) {
  nlohmann::json j = nlohmann::json::object();
  size_t at = 0;
  while (at <= v.size()) {
    size_t comma = v.find(',', at);
    std::string item = v.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (!item.empty()) {
      size_t eq = item.find('=');
      if (eq == std::string::npos) fail("synth: --types item '{}' is not ROLE=TYPE", item);
      j[item.substr(0, eq)] = item.substr(eq + 1);
    }
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return j;
}

void apply_flag(SynthSpec& s, const std::string& key, const std::string& value) {
  nlohmann::json obj = nlohmann::json::object();
  if (key == "types") {
    obj[key] = parse_types(value);
    apply_synth_json(s, obj);
    return;
  }
  // Numbers and booleans as JSON literals; anything else (or a mismatch) as a string.
  nlohmann::json parsed = nlohmann::json::parse(value, nullptr, false);
  if (!parsed.is_discarded() && (parsed.is_number() || parsed.is_boolean())) {
    obj[key] = parsed;
    try {
      apply_synth_json(s, obj);
      return;
    } catch (const Error&) {
    }
  }
  obj[key] = value;
  apply_synth_json(s, obj);
}

}  // namespace

void register_gguf_synth(CLI::App& gguf) {
  auto* cmd = gguf.add_subcommand(
      "synth",
      "Write a random-weight MoE GGUF (--arch deepseek2, deepseek32, glm-dsa or deepseek4; --preset "
      "glm5|deepseek32|v2lite|v4flash) (flags override --config; see src/model/synth.h for the keys)");
  static std::string out, config;
  static std::map<std::string, std::string> values;
  cmd->add_option("-o,--output", out, "Output GGUF path")->required();
  cmd->add_option("--config", config, "JSON object of spec keys (n_layer, n_embd, types, layout, vocab, seed, ...)");
  for (const auto& key : synth_spec_keys()) {
    std::string help = key == "types"
                           ? "Per-role tensor types: ROLE=TYPE,... (roles: embd output attn_q attn_kv_a indexer "
                             "attn_mla attn_output ffn ffn_exps ffn_shexp router; deepseek4 also compressor)"
                       : key == "vocab" ? "Take the vocabulary (tokenizer.* keys) from this GGUF"
                                        : fmt::format("spec key '{}'", key);
    cmd->add_option(flag_of(key), values[key], help);
  }
  cmd->callback([cmd] {
    SynthSpec s;
    if (!config.empty()) {
      std::ifstream in(config);
      if (!in) fail("synth: cannot read config '{}'", config);
      nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
      if (j.is_discarded()) fail("synth: {}: not valid JSON", config);
      apply_synth_json(s, j);
    }
    for (const auto& key : synth_spec_keys())
      if (cmd->get_option(flag_of(key))->count() > 0) apply_flag(s, key, values[key]);
    write_synth_deepseek2(s, out);
    fmt::print("wrote {}\n", out);
  });
}

void register_gguf_convert_mla_layout(CLI::App& gguf) {
  auto* cmd = gguf.add_subcommand("convert-mla-layout",
                                  "Copy a deepseek2 GGUF with attn_kv_b split into attn_k_b/attn_v_b or fused back");
  static std::string in, out, layout;
  static bool keep_quant = false;
  cmd->add_option("input", in, "Source GGUF")->required();
  cmd->add_option("output", out, "Destination GGUF")->required();
  cmd->add_option("--layout", layout, "Target layout: fused | split")
      ->required()
      ->check(CLI::IsMember({"fused", "split"}));
  cmd->add_flag("--keep-quant-type", keep_quant,
                "Requantize re-laid-out tensors into the source's quantized type (lossy) instead of writing F32");
  cmd->callback([] {
    convert_mla_layout(in, out, layout == "fused" ? MlaLayout::Fused : MlaLayout::Split, keep_quant);
    fmt::print("wrote {} ({} layout)\n", out, layout);
  });
}

}  // namespace mla::cli
