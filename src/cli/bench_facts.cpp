#include "cli/bench_facts.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <memory>
#include <vector>

#include "gguf/gguf.h"
#include "kernels/thread_pool.h"
#include "model/deepseek4_config.h"
#include "util/log.h"

namespace mla::cli {
namespace {

// llama.cpp's llama_ftype names (general.file_type), as llama-bench shows them.
std::string file_type_name(uint64_t id) {
  static const char* const names[] = {
      "all F32", "F16",     "Q4_0",   "Q4_1",   nullptr,  nullptr,  nullptr,  "Q8_0",  "Q5_0",    "Q5_1",   "Q2_K",
      "Q3_K_S",  "Q3_K_M",  "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K",  "IQ2_XXS", "IQ2_XS", "Q2_K_S",
      "IQ3_XS",  "IQ3_XXS", "IQ1_S",  "IQ4_NL", "IQ3_S",  "IQ3_M",  "IQ2_S",  "IQ2_M", "IQ4_XS",  "IQ1_M",  "BF16"};
  if (id < std::size(names) && names[id]) return names[id];
  return fmt::format("ftype {}", id);
}

bool is_routed_expert(const std::string& name) { return name.find("_exps.") != std::string::npos; }

}  // namespace

double measure_read_bandwidth(int n_threads, int64_t bytes, int passes) {
  using Clock = std::chrono::steady_clock;
  const int64_t n = std::max<int64_t>(bytes / 8, 1024);
  std::unique_ptr<uint64_t[]> buf(new uint64_t[n]);
  ThreadPool pool(n_threads);
  pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) buf[i] = static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull;
  });
  std::vector<uint64_t> sink(n_threads, 0);
  double best = 0;
  for (int p = 0; p < passes; ++p) {
    const auto t0 = Clock::now();
    pool.parallel_for(n, [&](int64_t b, int64_t e, int t) {
      uint64_t acc[8] = {};
      int64_t i = b;
      for (; i + 8 <= e; i += 8)
        for (int k = 0; k < 8; ++k) acc[k] += buf[i + k];
      for (; i < e; ++i) acc[0] += buf[i];
      uint64_t s = 0;
      for (uint64_t a : acc) s += a;
      sink[t] += s;
    });
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, static_cast<double>(n * 8) / std::max(s, 1e-9));
  }
  uint64_t keep = 0;
  for (uint64_t s : sink) keep ^= s;
  if (keep == 0x5a5a5a5a5a5a5a5aull) log().debug("membw: checksum {}", keep);  // keeps the reads alive
  return best;
}

int64_t deepseek4_routed_bytes(const GgufFile& f, const Deepseek4Config& c) {
  int64_t all = 0;
  for (const auto& t : f.tensors())
    if (is_routed_expert(t.name)) all += static_cast<int64_t>(t.n_bytes);
  return all / c.n_expert * c.n_expert_used;
}

ModelFacts describe(const GgufFile& f) {
  ModelFacts m;
  const std::string arch = f.opt_string("general.architecture").value_or("?");
  const auto ft = f.opt_uint("general.file_type");
  m.description = ft ? fmt::format("{} {}", arch, file_type_name(*ft)) : arch;
  for (const auto& t : f.tensors()) {
    m.size_bytes += t.n_bytes;
    m.n_params += t.n_elements;
    if (t.name != "token_embd.weight" && !is_routed_expert(t.name)) m.dense_bytes += static_cast<int64_t>(t.n_bytes);
  }
  return m;
}

std::string human_bytes(double b) {
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
  return fmt::format("{:.2f} MiB", b / (1024.0 * 1024));
}

std::string human_params(double n) {
  if (n >= 1e9) return fmt::format("{:.2f} B", n / 1e9);
  return fmt::format("{:.2f} M", n / 1e6);
}

}  // namespace mla::cli
