#pragma once
// The tools both synthetic-model writers share (synth.cpp: deepseek2 family, synth_deepseek4.cpp):
// a normal stream per tensor name, encoding rows into a tensor type, the tensor builder that
// writes a spec's matrices in their role's type, and the vocabulary copy.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gguf/gguf.h"
#include "model/synth.h"
#include "quant/quant.h"
#include "util/error.h"

namespace mla::synth {

// ---------------------------------------------------------------- random numbers

inline uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A normal stream per tensor name, so a tensor's values depend only on (seed, name, count).
class Normal {
 public:
  Normal(uint64_t seed, const std::string& name) : s_(seed) {
    for (unsigned char c : name) s_ = (s_ ^ c) * 0x100000001b3ull;
  }
  double uniform() { return (splitmix64(s_) >> 11) * (1.0 / 9007199254740992.0); }
  // Moves the stream past n values of next() (two uniforms each; splitmix64's state is a counter).
  void skip(uint64_t n) { s_ += 2 * n * 0x9e3779b97f4a7c15ull; }
  double next() {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * M_PI * u2);
  }

 private:
  uint64_t s_;
};

inline std::vector<float> normals(const SynthSpec& s, const std::string& name, int64_t n, double stddev) {
  Normal g(s.seed, name);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<float>(g.next() * stddev);
  return v;
}

inline std::vector<float> near_one(const SynthSpec& s, const std::string& name, int64_t n) {
  Normal g(s.seed, name);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<float>(1.0 + 0.1 * (2 * g.uniform() - 1));
  return v;
}

// ---------------------------------------------------------------- encoding

inline GgmlType fit_type(GgmlType t, int64_t row) {
  for (GgmlType cand : {t, GgmlType::Q8_0, GgmlType::F16, GgmlType::F32})
    if (row % ggml_traits(cand).block_elems == 0) return cand;
  return GgmlType::F32;
}

inline std::vector<uint8_t> encode(GgmlType t, const std::vector<float>& v, int64_t row) {
  const int64_t rows = static_cast<int64_t>(v.size()) / row;
  const int64_t rb = ggml_row_bytes(t, row);
  std::vector<uint8_t> out(static_cast<size_t>(rb * rows));
  for (int64_t r = 0; r < rows; ++r) quantize_row(t, v.data() + r * row, out.data() + r * rb, row);
  return out;
}

class Builder {
 public:
  Builder(const SynthSpec& s, GgufWriter& w) : s_(s), w_(w) {}

  GgmlType role_type(const std::string& role) const {
    auto it = s_.role_types.find(role);
    return it != s_.role_types.end() ? it->second : s_.type;
  }
  // A tensor from F32 values; ne in ggml order (ne[0] = row length).
  void add(const std::string& name, const std::string& role, std::vector<int64_t> ne, const std::vector<float>& v) {
    const int64_t row = ne[0];  // read before the call: its arguments may be evaluated in any order
    GgmlType t = role.empty() ? GgmlType::F32 : fit_type(role_type(role), row);
    w_.add_tensor(name, t, std::move(ne), encode(t, v, row));
  }
  // Generated and encoded a few rows at a time from the tensor's one stream (the same values as
  // normals() gives), so a tensor of billions of weights (384 experts at Kimi-K2 widths) never
  // exists as F32 in memory.
  void matrix(const std::string& name, const std::string& role, std::vector<int64_t> ne) {
    const int64_t row = ne[0];
    int64_t rows = 1;
    for (size_t i = 1; i < ne.size(); ++i) rows *= ne[i];
    const GgmlType t = role.empty() ? GgmlType::F32 : fit_type(role_type(role), row);
    const int64_t rb = ggml_row_bytes(t, row);
    const double stddev = 1.0 / std::sqrt(static_cast<double>(row));
    if (role == "ffn_exps" && s_.tiled_experts) {
      tiled(name, t, std::move(ne), rows, stddev);
      return;
    }
    std::vector<uint8_t> out(static_cast<size_t>(rb * rows));
    const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 20) / row);
    const int64_t n_chunks = (rows + chunk - 1) / chunk;
    // Chunks on every core: each starts its own copy of the stream at its first value.
    std::atomic<int64_t> next{0};
    auto work = [&] {
      std::vector<float> buf(static_cast<size_t>(chunk * row));
      for (int64_t c; (c = next.fetch_add(1)) < n_chunks;) {
        const int64_t r0 = c * chunk, nr = std::min(chunk, rows - r0);
        Normal g(s_.seed, name);
        g.skip(static_cast<uint64_t>(r0 * row));
        for (int64_t i = 0; i < nr * row; ++i) buf[static_cast<size_t>(i)] = static_cast<float>(g.next() * stddev);
        for (int64_t r = 0; r < nr; ++r) quantize_row(t, buf.data() + r * row, out.data() + (r0 + r) * rb, row);
      }
    };
    const int64_t n_threads = std::min<int64_t>(n_chunks, std::max(1u, std::thread::hardware_concurrency()));
    std::vector<std::thread> pool;
    for (int64_t i = 1; i < n_threads; ++i) pool.emplace_back(work);
    work();
    for (auto& th : pool) th.join();
    w_.add_tensor(name, t, std::move(ne), std::move(out));
  }
  void norm(const std::string& name, int64_t n) { add(name, "", {n}, near_one(s_, name, n)); }

 private:
  // tiled_experts: a pool of kTiledPool rows quantized from the tensor's stream now, and the
  // tensor's rows copied from it (row r takes pool row hash(seed, name, r) % kTiledPool) when the
  // writer reaches it, so that tens of GB of routed experts are written at the disk's rate.
  static constexpr int64_t kTiledPool = 64;
  void tiled(const std::string& name, GgmlType t, std::vector<int64_t> ne, int64_t rows, double stddev) {
    const int64_t row = ne[0], rb = ggml_row_bytes(t, row);
    auto pool = std::make_shared<std::vector<uint8_t>>(encode(t, normals(s_, name, kTiledPool * row, stddev), row));
    uint64_t key = s_.seed;
    for (unsigned char c : name) key = (key ^ c) * 0x100000001b3ull;
    auto make = [pool, key, rows, rb] {
      std::vector<uint8_t> out(static_cast<size_t>(rows * rb));
      uint64_t st = key;
      for (int64_t r = 0; r < rows; ++r) {
        const auto src = static_cast<int64_t>(splitmix64(st) % kTiledPool);
        std::memcpy(out.data() + r * rb, pool->data() + src * rb, static_cast<size_t>(rb));
      }
      return out;
    };
    w_.add_tensor_lazy(name, t, std::move(ne), static_cast<size_t>(rows * rb), make);
  }

  const SynthSpec& s_;
  GgufWriter& w_;
};

// Copies the tokenizer.* keys of the GGUF at path; n_vocab = its token count.
inline void copy_vocab(const std::string& path, GgufWriter& w, int64_t& n_vocab) {
  auto v = GgufFile::open(path);
  int64_t n_tokens = 0;
  for (const auto& [k, val] : v->metadata()) {
    if (k.rfind("tokenizer.", 0) != 0) continue;
    w.set(k, val);
    if (k == "tokenizer.ggml.tokens" && val.type() == GgufValueType::ARRAY)
      n_tokens = static_cast<int64_t>(val.as_array().items.size());
  }
  if (n_tokens < 1) fail("synth: {}: no tokenizer.ggml.tokens list to take the vocabulary from", path);
  n_vocab = n_tokens;
}

// The spec's vocabulary (vocab_path: tokenizer.* keys and the vocabulary size) and chat template
// file (chat_template_path), where given.
inline void copy_vocab_and_template(const SynthSpec& s, GgufWriter& w, int64_t& n_vocab) {
  if (!s.vocab_path.empty()) copy_vocab(s.vocab_path, w, n_vocab);
  if (!s.chat_template_path.empty()) {
    std::ifstream in(s.chat_template_path, std::ios::binary);
    if (!in) fail("synth: cannot read chat template '{}'", s.chat_template_path);
    std::ostringstream text;
    text << in.rdbuf();
    w.set("tokenizer.chat_template", GgufValue::str(text.str()));
  }
}

}  // namespace mla::synth
