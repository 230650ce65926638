#include "cli/bench_prefix.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <vector>

#include "engine/deepseek2_runner.h"
#include "engine/engine.h"
#include "parallel/world.h"
#include "util/error.h"
#include "util/log.h"

namespace mla::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct Phase {
  std::string name;
  std::vector<double> ttft;  // seconds, one per timed request
  int64_t loaded = 0;        // prompt tokens loaded from a lower tier, over the timed requests
  int64_t cached = 0;        // prompt tokens served by any prefix cache tier
};

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

double sd(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size() - 1));
}

class Driver {
 public:
  Driver(const PrefixReuseArgs& a, int n_vocab) : rng_(a.seed), pick_(0, n_vocab - 1) {}

  std::vector<int32_t> random_ids(int n) {
    std::vector<int32_t> ids(n);
    for (int32_t& id : ids) id = pick_(rng_);
    return ids;
  }

  // One request of max_tokens 1; returns its time to first token (its whole time) and, through
  // cached, the prompt tokens it found in a prefix cache.
  double ttft(Engine& engine, std::vector<int32_t> prompt, int* cached = nullptr) {
    SamplingParams p;
    p.max_tokens = 1;
    p.ignore_eos = true;
    std::string error;
    int n_cached = 0;
    engine.add_request(fmt::format("prefix{}", n_req_++), std::move(prompt), p, [&](RequestOutput&& out) {
      if (!out.error.empty()) error = out.error;
      n_cached = out.n_cached_tokens;
    });
    const auto t0 = Clock::now();
    while (engine.has_unfinished()) engine.step();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!error.empty()) fail("bench: prefix reuse: {}", error);
    if (cached) *cached = n_cached;
    return s;
  }

 private:
  std::mt19937_64 rng_;
  std::uniform_int_distribution<int32_t> pick_;
  int n_req_ = 0;
};

// The phases' TTFTs as a table (or JSON), and a block read back against one computed.
void print_prefix_reuse(const PrefixReuseArgs& a, const std::vector<Phase>& phases, const EngineCounters& c, int bs) {
  // A block read back against one computed: the tier-2 phase's time over the tier-0 phase's
  // (the suffix and the last prefix token, computed in both) per loaded block, against the cold
  // phase's over the tier-0 phase's per prefix block.
  const double n_blocks = static_cast<double>(a.n_prefix / bs);
  const double t_cold = mean(phases[0].ttft), t0 = mean(phases[1].ttft), t2 = mean(phases[3].ttft);
  const double load_per_block = n_blocks > 0 ? std::max(0.0, t2 - t0) / n_blocks : 0.0;
  const double compute_per_block = n_blocks > 0 ? std::max(0.0, t_cold - t0) / n_blocks : 0.0;
  if (a.json) {
    nlohmann::json out = {{"model_filename", a.model},
                          {"n_prefix", a.n_prefix},
                          {"n_suffix", a.n_suffix},
                          {"block_size", bs},
                          {"disk_bytes_read", c.tier_disk_bytes_read},
                          {"load_seconds_per_block", load_per_block},
                          {"compute_seconds_per_block", compute_per_block},
                          {"phases", nlohmann::json::array()}};
    for (const Phase& ph : phases)
      out["phases"].push_back({{"phase", ph.name},
                               {"ttft_seconds", mean(ph.ttft)},
                               {"stddev_seconds", sd(ph.ttft)},
                               {"samples_seconds", ph.ttft},
                               {"vs_cold", t_cold > 0 ? mean(ph.ttft) / t_cold : 0.0},
                               {"tokens_cached", ph.cached},
                               {"tokens_loaded", ph.loaded}});
    fmt::print("{}\n", out.dump(1));
    return;
  }
  fmt::print("prefix reuse: {}-token shared prefix, {}-token suffixes, block {}, {} repetition(s)\n", a.n_prefix,
             a.n_suffix, bs, a.reps);
  fmt::print("| prefix found in | TTFT ms | vs cold | prompt tokens cached | of them loaded from a tier |\n");
  fmt::print("| --- | ---: | ---: | ---: | ---: |\n");
  for (const Phase& ph : phases)
    fmt::print("| {} | {:.1f} ± {:.1f} | {:.3f}x | {} | {} |\n", ph.name, 1e3 * mean(ph.ttft), 1e3 * sd(ph.ttft),
               t_cold > 0 ? mean(ph.ttft) / t_cold : 0.0, ph.cached / std::max(1, a.reps),
               ph.loaded / std::max(1, a.reps));
  fmt::print("a block read back from disk: {:.3f} ms; computed: {:.3f} ms ({:.1f}%)\n", 1e3 * load_per_block,
             1e3 * compute_per_block, compute_per_block > 0 ? 100.0 * load_per_block / compute_per_block : 0.0);
}

}  // namespace

void prefix_reuse_bench(const PrefixReuseArgs& a, EngineSetup setup) {
  if (world().size() > 1) fail("bench: --prefix-reuse runs in a single process");
  if (a.n_prefix < 1 || a.n_suffix < 1)
    fail("bench: --prefix-reuse needs a prefix and a suffix of at least one token, got {},{}", a.n_prefix, a.n_suffix);
  std::string dir = a.dir;
  bool temp_dir = false;
  if (dir.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mla-bench-kv-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) fail("bench: cannot create a temporary --kv-cache-dir");
    dir = tmpl;
    temp_dir = true;
  }
  // One request at a time in a cache that holds one: a filler prompt of the cache's size takes
  // every block, which evicts the shared prefix from the arena (the tier-1 and tier-2 phases).
  setup.engine.enable_prefix_caching = true;
  const int bs = setup.kv.block_size;
  setup.kv.tokens = (a.n_prefix + a.n_suffix + 1 + bs - 1) / bs * bs;
  setup.kv.memory_bytes = 0;
  setup.engine.kv_tiers.dir = dir;
  setup.engine.kv_tiers.host_bytes = int64_t{1} << 40;  // a bound never reached: every block stays
  setup.engine.kv_tiers.writer_queue = 1 << 20;         // and is written: the restart finds them all
  auto make_engine = [&](bool host) {
    auto runner = std::make_unique<Deepseek2Runner>(a.model, setup.policy, setup.model, setup.kv);
    if (runner->max_context() < setup.kv.tokens)
      fail("bench: --prefix-reuse needs {} tokens of context, the model allows {}", setup.kv.tokens,
           runner->max_context());
    EngineConfig ec = setup.engine;
    if (!host) ec.kv_tiers.host_bytes = 0;
    return std::make_unique<Engine>(std::move(runner), ec, nullptr);
  };
  auto engine = make_engine(true);
  const int n_vocab = engine->n_vocab();
  const int capacity = static_cast<int>(engine->runner().cache().n_slots());
  Driver d(a, n_vocab);
  const std::vector<int32_t> prefix = d.random_ids(a.n_prefix);
  auto with_suffix = [&] {
    std::vector<int32_t> p = prefix;
    for (int32_t t : d.random_ids(a.n_suffix)) p.push_back(t);
    return p;
  };
  auto evict = [&](Engine& e) { d.ttft(e, d.random_ids(capacity - 1)); };
  std::vector<Phase> phases(4);
  phases[0].name = "cold";
  phases[1].name = "tier 0 (KV cache)";
  phases[2].name = "tier 1 (host RAM)";
  phases[3].name = "tier 2 (disk, restart)";
  auto timed = [&](Engine& e, Phase& ph, std::vector<int32_t> prompt) {
    const int64_t loaded0 = e.counters().n_tier_tokens_loaded;
    int cached = 0;
    ph.ttft.push_back(d.ttft(e, std::move(prompt), &cached));
    ph.loaded += e.counters().n_tier_tokens_loaded - loaded0;
    ph.cached += cached;
  };

  d.ttft(*engine, with_suffix());  // warm-up: computes the prefix, stores it in every tier
  for (int r = 0; r < a.reps; ++r) timed(*engine, phases[1], with_suffix());
  for (int r = 0; r < a.reps; ++r) timed(*engine, phases[0], d.random_ids(a.n_prefix + a.n_suffix));
  for (int r = 0; r < a.reps; ++r) {
    evict(*engine);
    timed(*engine, phases[2], with_suffix());
  }
  engine.reset();  // stops the writer once it has written every queued block
  engine = make_engine(false);
  for (int r = 0; r < a.reps; ++r) {
    if (r > 0) evict(*engine);
    timed(*engine, phases[3], with_suffix());
  }
  const EngineCounters c = engine->counters();
  engine.reset();
  if (temp_dir) std::filesystem::remove_all(dir);

  print_prefix_reuse(a, phases, c, bs);
}

}  // namespace mla::cli
