#pragma once
// Helpers for model tests: a per-process temp dir, synth files, GGUF rewriting, forward runs.
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/deepseek2.h"
#include "model/synth.h"

namespace mla::testing {

inline std::string& temp_dir_storage() {
  static std::string dir;
  return dir;
}

// Created on first use, removed at exit.
inline const std::string& temp_dir() {
  std::string& dir = temp_dir_storage();
  if (dir.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mla_model_test_XXXXXX").string();
    if (!mkdtemp(tmpl.data())) std::abort();
    dir = tmpl;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(temp_dir_storage(), ec);
    });
  }
  return dir;
}

// Writes a synth model (once per name per process) and returns its path.
// A small deepseek2 shape for tests that need a real forward pass but no particular sizes.
inline SynthSpec small_spec() {
  SynthSpec s;
  s.n_embd = 64;
  s.n_ff = 64;
  s.q_lora_rank = 32;
  s.kv_lora_rank = 32;
  s.qk_nope = 16;
  s.qk_rope = 8;
  s.v_head = 16;
  s.n_ff_exp = 32;
  s.n_vocab = 64;
  return s;
}

inline std::string synth_file(const std::string& name, const SynthSpec& spec) {
  std::string path = temp_dir() + "/" + name + ".gguf";
  if (!std::filesystem::exists(path)) write_synth_deepseek2(spec, path);
  return path;
}

// Copies `in` to `out`; edit(name, ...) may change or drop each tensor (return false to drop).
struct TensorEdit {
  GgmlType type;
  std::vector<int64_t> ne;
  std::vector<uint8_t> data;
};
inline void rewrite_gguf(const std::string& in, const std::string& out,
                         const std::function<bool(const std::string&, TensorEdit&)>& edit,
                         const std::function<void(GgufWriter&)>& edit_keys = nullptr) {
  auto f = GgufFile::open(in);
  GgufWriter w;
  w.copy_metadata_from(*f);
  if (edit_keys) edit_keys(w);
  for (const auto& t : f->tensors()) {
    TensorEdit e{t.type, t.ne, std::vector<uint8_t>(t.data, t.data + t.n_bytes)};
    if (edit(t.name, e)) w.add_tensor(t.name, e.type, e.ne, std::move(e.data));
  }
  w.write(out);
}

// Logits of every position of `prompt` (one prefill) followed by `n_decode` greedy steps
// fed back one token at a time; returns all rows concatenated.
inline std::vector<float> run_logits(const std::string& path, MlaPathPolicy policy, const std::vector<int32_t>& prompt,
                                     int n_decode, int threads = 2, bool dsa = true) {
  auto b = load_deepseek2(path, weight_options_for(policy, false));
  ModelOptions o;
  o.n_threads = threads;
  o.max_batch_tokens = 64;
  o.dsa = dsa;
  Deepseek2Model m(b->config, b->weights, o);
  LatentCache cache = m.make_cache(static_cast<int64_t>(prompt.size()) + n_decode + 1);
  const int64_t V = b->config.n_vocab;
  std::vector<float> all(prompt.size() * V);
  m.forward(single_sequence_batch(prompt, 0, true, policy), cache, all.data());
  int32_t n_past = static_cast<int32_t>(prompt.size());
  for (int i = 0; i < n_decode; ++i) {
    const float* last = all.data() + all.size() - V;
    int32_t next = 0;
    for (int64_t v = 1; v < V; ++v)
      if (last[v] > last[next]) next = static_cast<int32_t>(v);
    std::vector<float> row(V);
    m.forward(single_sequence_batch({next}, n_past++, true, policy), cache, row.data());
    all.insert(all.end(), row.begin(), row.end());
  }
  return all;
}

inline double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, mag = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    mag = std::max(mag, static_cast<double>(std::fabs(b[i])));
  }
  return mag > 0 ? diff / mag : diff;
}

}  // namespace mla::testing
