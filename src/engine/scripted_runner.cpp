// The scripted model runner (see scripted_runner.h).
#include "engine/scripted_runner.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "util/error.h"

namespace mla {

ScriptedRunner::ScriptedRunner(std::vector<ScriptEntry> script, int n_vocab, int32_t eos, DecodeFn decode,
                               int max_context, int block_size, int32_t n_blocks)
    : script_(std::move(script)),
      n_vocab_(n_vocab),
      eos_(eos),
      decode_(std::move(decode)),
      max_context_(max_context),
      cache_({1, 1, 1}, GgmlType::F32, block_size, n_blocks) {}

int32_t ScriptedRunner::next_token(std::span<const int32_t> context) const {
  const std::string text = decode_(context);
  for (const ScriptEntry& e : script_) {
    if (!e.trigger.empty() && text.find(e.trigger) == std::string::npos) continue;
    const auto& out = e.output;
    size_t k = std::min(out.size(), context.size());
    for (; k > 0; --k)
      if (std::equal(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(k),
                     context.end() - static_cast<std::ptrdiff_t>(k)))
        break;
    return k < out.size() ? out[k] : eos_;
  }
  return eos_;
}

void ScriptedRunner::forward(const BatchMeta& meta, float* logits) {
  std::vector<float> rows;
  std::vector<int32_t> context;
  size_t out_row = 0;
  for (const SeqMeta& s : meta.seqs) {
    for (int i = s.query_start; i < s.query_start + s.query_len; ++i) {
      const float row[2] = {static_cast<float>(meta.token_ids[i]), 0.0f};
      cache_.write_row(0, meta.slot_mapping[i], row);
      if (out_row >= meta.logits_rows.size() || meta.logits_rows[out_row] != i) continue;
      // The context up to this token, read back from the cache.
      const int n = meta.positions[i] + 1;
      rows.resize(static_cast<size_t>(n) * 2);
      cache_.read_rows(0, {meta.context_slots.data() + s.slots_start, static_cast<size_t>(n)}, rows.data());
      context.resize(n);
      for (int j = 0; j < n; ++j) context[j] = static_cast<int32_t>(rows[2 * j]);
      float* l = logits + out_row++ * n_vocab_;
      std::fill(l, l + n_vocab_, -30.0f);
      l[next_token(context)] = 30.0f;
    }
  }
}

std::vector<ScriptEntry> load_script(const std::string& path,
                                     const std::function<std::vector<int32_t>(const std::string&)>& encode) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("scripted output: cannot read '{}'", path));
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_array())
    throw Error(fmt::format("scripted output '{}': not a JSON list of {{\"trigger\", \"output\"}}", path));
  std::vector<ScriptEntry> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& e = j[i];
    if (!e.is_object() || !e.contains("output") || !e["output"].is_string())
      throw Error(fmt::format("scripted output '{}': entry {} has no \"output\" string", path, i));
    out.push_back({e.value("trigger", ""), encode(e["output"].get<std::string>())});
  }
  return out;
}

}  // namespace mla
