// mla bench -m FILE [-p 512] [-n 128] [-d 0,4096] [-t N] [-r 5] [--json]: prompt-processing and
// decode speed in the style of llama.cpp's llama-bench, measured through the serving engine
// (scheduler, paged latent cache, sampler) as `mla run` and `mla serve` drive it.
//   ppP        a P-token prompt, one prefill (the engine's chunking), timed until its first token;
//   tgN@dD     a D-token prompt prefilled untimed (D = 0: one token), then N tokens decoded one
//              at a time, timed from the first token to the last.
// Each test runs one untimed warm-up repetition first (not with --no-warmup), then -r timed ones on fresh requests
// (prompt ids drawn from a seeded generator, prefix cache off), and prints mean ± sd of t/s.
// Decode tests also show the weight bytes read per token (every matrix but the embedding table
// and the routed experts, plus the routed experts' rows the forward counted) and the GB/s that
// makes, as a share of `mla bench --membw` (a read-bandwidth probe over all threads).
// --profile adds, per test, where a token's time goes: each forward stage's ms and bytes read per
// token and the GB/s that makes (model/stage_counters.h), and the time outside the stages.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cli/bench_facts.h"
#include "cli/bench_prefix.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/engine_args.h"
#include "cli/model_open.h"
#include "engine/deepseek2_runner.h"
#include "engine/deepseek4_runner.h"
#include "engine/engine.h"
#include "engine/speculative.h"
#include "gguf/gguf.h"
#include "parallel/dist_runner.h"
#include "parallel/world.h"
#include "util/error.h"
#include "util/log.h"

namespace mla::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchArgs {
  std::string model;
  std::vector<int> n_prompt{512};
  std::vector<int> n_gen{128};
  std::vector<int> depth{0};
  int reps = 5;
  bool warmup = true;  // --no-warmup: no untimed repetition first
  bool json = false;
  bool membw = false;
  bool profile = false;
  std::string membw_size = "512M";
  uint64_t seed = 1;
  EngineArgs engine;  // the model's flags; one sequence at a time, no prefix caching
  CommonOptions common;
  std::vector<int> prefix_reuse;  // --prefix-reuse P,S (cli/bench_prefix.h)
  std::string kv_cache_dir;       // for --prefix-reuse
};

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// ---------------------------------------------------------------- one test

struct Test {
  int n_prompt = 0;  // pp test when > 0
  int n_gen = 0;     // tg test when > 0
  int depth = 0;
  std::string name() const {
    std::string s = n_prompt > 0 ? fmt::format("pp{}", n_prompt) : fmt::format("tg{}", n_gen);
    if (depth > 0) s += fmt::format("@d{}", depth);
    return s;
  }
};

// --weights-memory: the expert cache per token of a test's timed part.
struct ExpertCacheRates {
  double hits = 0, misses = 0, bytes_read = 0, stall_s = 0;
  // Read-ahead (--expert-io-threads): bytes read ahead (part of bytes_read), (layer, expert) pairs
  // predicted, predicted and used, used in a layer that had a prediction.
  double read_ahead_bytes = 0, predictions = 0, predictions_used = 0, predictable_uses = 0;
  void add(const ExpertCacheRates& o, double w) {
    hits += o.hits * w, misses += o.misses * w, bytes_read += o.bytes_read * w, stall_s += o.stall_s * w;
    read_ahead_bytes += o.read_ahead_bytes * w, predictions += o.predictions * w;
    predictions_used += o.predictions_used * w, predictable_uses += o.predictable_uses * w;
  }
};

struct Sample {
  double tps = 0;
  double weight_bytes_per_token = 0;  // decode tests
  double comm_bytes_per_token = 0;    // rank 0's bytes sent + received per token (several ranks)
  // Decode tests: the engine's counters from the first token to the last (steps, the trunk's and
  // the MTP layer's forward time, the speculation counters).
  EngineCounters decode;
  // Per token of the timed part (decode: first token to last; prompt: the prefill): each stage's
  // seconds and bytes read (Deepseek2Model's StageCounters, this rank's).
  std::array<double, kStageCount> stage_s{}, stage_bytes{}, stage_regions{};
  double regions = 0;  // the model's thread-pool regions (hand-offs) per token
  ExpertCacheRates expert_cache;
};

// The stage counters and the pool's region count now, to subtract.
struct StageSnapshot {
  std::array<int64_t, kStageCount> ns{}, bytes{}, stage_regions{};
  int64_t regions = 0;
  ExpertCacheCounters expert_cache;
  // r: the deepseek2 family's runner; null (deepseek4, which has no stage counters): zeros.
  explicit StageSnapshot(const Deepseek2Runner* r) {
    if (!r) return;
    regions = r->parallel_regions();
    expert_cache = r->expert_cache_counters();
    const StageCounters& c = r->stage_counters();
    for (int i = 0; i < kStageCount; ++i)
      ns[i] = c.ns[i].load(), bytes[i] = c.bytes[i].load(), stage_regions[i] = c.regions[i].load();
  }
};

class Bencher {
 public:
  // runner: the deepseek2 family's (it counts the routed experts' bytes read), or null with
  // routed_bytes the bytes of n_expert_used experts per layer that every decode token reads
  // (deepseek4).
  Bencher(Engine& engine, const Deepseek2Runner* runner, int n_vocab, int64_t dense_bytes, uint64_t seed,
          int64_t routed_bytes = 0)
      : engine_(engine),
        runner_(runner),
        n_vocab_(n_vocab),
        dense_bytes_(dense_bytes),
        routed_bytes_(routed_bytes),
        rng_(seed) {}

  // greedy: temperature 0 (speculation on and off then give the same tokens).
  Sample run(const Test& t, bool greedy = false) {
    // Prompt: n_prompt tokens (pp), or the depth (at least one token) before decoding (tg).
    const int n_ids = t.n_prompt > 0 ? t.n_prompt : std::max(1, t.depth);
    std::vector<int32_t> ids(n_ids);
    std::uniform_int_distribution<int32_t> pick(0, n_vocab_ - 1);
    for (int32_t& id : ids) id = pick(rng_);
    SamplingParams p;
    p.max_tokens = t.n_prompt > 0 ? 1 : t.n_gen + 1;
    p.ignore_eos = true;
    if (greedy) p.temperature = 0;
    std::optional<Clock::time_point> first;
    int64_t got = 0;
    std::string error;
    engine_.add_request(fmt::format("bench{}", n_req_++), std::move(ids), p, [&](RequestOutput&& out) {
      for (const auto& o : out.outputs) {
        if (!o.token_ids.empty() && !first) first = Clock::now();
        got += static_cast<int64_t>(o.token_ids.size());
      }
      if (!out.error.empty()) error = out.error;
    });
    // Rank 0 takes part in every exchange of a step: its volume is the step's.
    const CommCounters& cc = world().counters();
    auto comm_bytes = [&cc] { return cc.bytes_sent.load() + cc.bytes_received.load(); };
    const auto t0 = Clock::now();
    const StageSnapshot stages0(runner_);
    std::optional<StageSnapshot> stages_first;
    int64_t bytes0 = 0, comm0 = comm_bytes(), comm_first = 0;
    EngineCounters c_first;
    while (engine_.has_unfinished()) {
      const bool had_first = first.has_value();
      engine_.step();
      if (!had_first && first) {
        bytes0 = routed_counted();
        comm_first = comm_bytes();
        c_first = engine_.counters();
        stages_first.emplace(runner_);
      }
    }
    const auto t_end = Clock::now();
    if (!error.empty()) fail("bench: {}: {}", t.name(), error);
    if (!first) fail("bench: {}: the request produced no token", t.name());
    Sample s;
    // The timed part's stage time and bytes per token.
    auto stage_rates = [&s](const StageSnapshot& a, const StageSnapshot& b, double tokens) {
      for (int i = 0; i < kStageCount; ++i) {
        s.stage_s[i] = static_cast<double>(b.ns[i] - a.ns[i]) * 1e-9 / tokens;
        s.stage_bytes[i] = static_cast<double>(b.bytes[i] - a.bytes[i]) / tokens;
        s.stage_regions[i] = static_cast<double>(b.stage_regions[i] - a.stage_regions[i]) / tokens;
      }
      s.regions = static_cast<double>(b.regions - a.regions) / tokens;
      const ExpertCacheCounters &x = a.expert_cache, &y = b.expert_cache;
      auto per = [tokens](int64_t later, int64_t earlier) { return static_cast<double>(later - earlier) / tokens; };
      s.expert_cache = {per(y.hits, x.hits),
                        per(y.misses, x.misses),
                        per(y.bytes_read, x.bytes_read),
                        (y.stall_seconds - x.stall_seconds) / tokens,
                        per(y.read_ahead_bytes, x.read_ahead_bytes),
                        per(y.predictions, x.predictions),
                        per(y.predictions_used, x.predictions_used),
                        per(y.predictable_uses, x.predictable_uses)};
    };
    if (t.n_prompt > 0) {
      stage_rates(stages0, *stages_first, t.n_prompt);
      s.tps = t.n_prompt / std::max(seconds(t0, *first), 1e-9);
      s.comm_bytes_per_token = static_cast<double>(comm_first - comm0) / t.n_prompt;
    } else {
      const int64_t decoded = got - 1;
      if (decoded != t.n_gen) fail("bench: {}: decoded {} tokens, expected {}", t.name(), decoded, t.n_gen);
      s.tps = decoded / std::max(seconds(*first, t_end), 1e-9);
      stage_rates(*stages_first, StageSnapshot(runner_), static_cast<double>(decoded));
      const int64_t routed = runner_ ? routed_counted() - bytes0 : routed_bytes_ * decoded;
      s.weight_bytes_per_token = static_cast<double>(dense_bytes_) + static_cast<double>(routed) / decoded;
      s.comm_bytes_per_token = static_cast<double>(comm_bytes() - comm_first) / decoded;
      s.decode = engine_.counters() - c_first;
    }
    return s;
  }

 private:
  int64_t routed_counted() const { return runner_ ? runner_->moe_counters().expert_bytes.load() : 0; }

  Engine& engine_;
  const Deepseek2Runner* runner_;
  int n_vocab_;
  int64_t dense_bytes_;
  int64_t routed_bytes_;
  std::mt19937_64 rng_;
  int n_req_ = 0;
};

double mean_of(const std::vector<double>& v);

// --profile: one test's time and bytes per token by forward stage.
struct StageProfileRow {
  std::string test;
  double s_per_token;  // wall time per token of the whole test (1 / t/s)
  std::array<double, kStageCount> stage_s, stage_bytes, stage_regions;
  double regions;
  ExpertCacheRates expert_cache;
  bool has_expert_cache;
};

void print_stage_profile(const StageProfileRow& r) {
  double sum = 0, bytes = 0;
  for (int i = 0; i < kStageCount; ++i) sum += r.stage_s[i], bytes += r.stage_bytes[i];
  fmt::print(
      "\n{}: {:.3f} ms per token, {:.3f} ms of it in the forward's stages; {:.1f} thread-pool regions "
      "(hand-offs to the workers and back) per token\n",
      r.test, 1e3 * r.s_per_token, 1e3 * sum, r.regions);
  fmt::print(
      "| stage | ms/token | share | MB/token | GB/s | regions/token |\n| --- | ---: | ---: | ---: | ---: | ---: |\n");
  auto row = [&](const char* name, double sec, double b, double regions) {
    fmt::print("| {} | {:.3f} | {:.1f}% | {:.2f} | {} | {} |\n", name, 1e3 * sec, 100.0 * sec / r.s_per_token, b / 1e6,
               sec > 0 && b > 0 ? fmt::format("{:.2f}", b / sec / 1e9) : std::string("-"),
               regions >= 0 ? fmt::format("{:.1f}", regions) : std::string("-"));
  };
  for (int i = 0; i < kStageCount; ++i) row(kStageNames[i], r.stage_s[i], r.stage_bytes[i], r.stage_regions[i]);
  row("outside the stages (sampling, scheduling, hand-offs)", std::max(0.0, r.s_per_token - sum), 0, -1);
  row("all", r.s_per_token, bytes, r.regions);
  if (!r.has_expert_cache) return;
  const ExpertCacheRates& e = r.expert_cache;
  const double lookups = e.hits + e.misses;
  fmt::print(
      "expert cache per token: {:.1f} hits, {:.1f} misses (hit rate {:.1f}%), {:.2f} MB read from the file, "
      "{:.3f} ms stalled waiting for experts ({:.1f}% of the token)\n",
      e.hits, e.misses, lookups > 0 ? 100.0 * e.hits / lookups : 0.0, e.bytes_read / 1e6, 1e3 * e.stall_s,
      r.s_per_token > 0 ? 100.0 * e.stall_s / r.s_per_token : 0.0);
  if (e.predictions > 0)
    fmt::print(
        "read-ahead per token: {:.2f} MB read ahead, {:.2f} MB on demand; {:.1f} experts predicted, precision "
        "{:.1f}% (predicted and used), recall {:.1f}% (used and predicted)\n",
        e.read_ahead_bytes / 1e6, (e.bytes_read - e.read_ahead_bytes) / 1e6, e.predictions,
        100.0 * e.predictions_used / e.predictions,
        e.predictable_uses > 0 ? 100.0 * e.predictions_used / e.predictable_uses : 0.0);
}

// --speculative-config: each decode test alternates repetitions without and with the MTP layer on
// the same engine and model, decoding greedily (so both produce the same tokens), and reports
// both speeds, the acceptance and what one step costs: the trunk's forward (a 1-token decode
// without speculation, a verify of 1 + k rows with it) and the MTP layer's calls.
void spec_bench(Engine& engine, const Deepseek2Runner& runner, int n_vocab, const ModelFacts& facts,
                const std::vector<Test>& tests, const BenchArgs& a, int n_spec) {
  Bencher bencher(engine, &runner, n_vocab, facts.dense_bytes, a.seed);
  nlohmann::json out = nlohmann::json::array();
  if (!a.json) {
    fmt::print(
        "| model | test | k | t/s off | t/s mtp | speed-up | accepted | mean accepted length | trunk ms/step off "
        "| trunk ms/step mtp | verify / decode | mtp ms/step |\n");
    fmt::print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  }
  for (const Test& t : tests) {
    if (t.n_gen == 0) continue;      // prompt processing does not speculate
    EngineCounters off_sum, on_sum;  // the decode parts' counters, summed over the timed repetitions
    std::vector<double> off_tps, on_tps;
    for (int r = 0; r <= a.reps; ++r) {  // repetition 0 warms up
      for (int on = 0; on < 2; ++on) {
        engine.set_speculative_tokens(on ? n_spec : 0);
        const Sample s = bencher.run(t, /*greedy=*/true);
        if (r == 0) continue;
        EngineCounters& sum = on ? on_sum : off_sum;
        (on ? on_tps : off_tps).push_back(s.tps);
        sum.n_steps += s.decode.n_steps;
        sum.n_spec_steps += s.decode.n_spec_steps;
        sum.n_spec_drafts += s.decode.n_spec_drafts;
        sum.n_spec_draft_tokens += s.decode.n_spec_draft_tokens;
        sum.n_spec_accepted_tokens += s.decode.n_spec_accepted_tokens;
        sum.forward_seconds += s.decode.forward_seconds;
        sum.mtp_seconds += s.decode.mtp_seconds;
      }
    }
    const double off = mean_of(off_tps), on = mean_of(on_tps);
    // Never the "no drafts" 0s: -r >= 1, and every timed decode of at least one token drafts.
    const auto [rate, mean_len] =
        spec_acceptance(on_sum.n_spec_drafts, on_sum.n_spec_draft_tokens, on_sum.n_spec_accepted_tokens);
    const double step_off = off_sum.n_steps > 0 ? off_sum.forward_seconds / off_sum.n_steps : 0.0;
    const double step_on = on_sum.n_steps > 0 ? on_sum.forward_seconds / on_sum.n_steps : 0.0;
    const double mtp_step = on_sum.n_steps > 0 ? on_sum.mtp_seconds / on_sum.n_steps : 0.0;
    if (a.json) {
      out.push_back({{"model_filename", a.model},
                     {"model_type", facts.description},
                     {"test", t.name()},
                     {"n_gen", t.n_gen},
                     {"n_depth", t.depth},
                     {"num_speculative_tokens", n_spec},
                     {"avg_ts_off", off},
                     {"avg_ts_mtp", on},
                     {"samples_ts_off", off_tps},
                     {"samples_ts_mtp", on_tps},
                     {"speedup", off > 0 ? on / off : 0.0},
                     {"acceptance_rate", rate},
                     {"mean_accepted_length", mean_len},
                     {"steps_off", off_sum.n_steps},
                     {"steps_mtp", on_sum.n_steps},
                     {"verify_steps", on_sum.n_spec_steps},
                     {"trunk_seconds_per_step_off", step_off},
                     {"trunk_seconds_per_step_mtp", step_on},
                     {"verify_over_decode", step_off > 0 ? step_on / step_off : 0.0},
                     {"mtp_seconds_per_step", mtp_step}});
      continue;
    }
    fmt::print("| {} | {} | {} | {:.2f} | {:.2f} | {:.2f}x | {:.1f}% | {:.2f} | {:.3f} | {:.3f} | {:.2f}x | {:.3f} |\n",
               facts.description, t.name(), n_spec, off, on, off > 0 ? on / off : 0.0, 100.0 * rate, mean_len,
               1e3 * step_off, 1e3 * step_on, step_off > 0 ? step_on / step_off : 0.0, 1e3 * mtp_step);
    std::fflush(stdout);
  }
  if (a.json) fmt::print("{}\n", out.dump(1));
}

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / v.size();
}

double sd_of(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = mean_of(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / (v.size() - 1));
}

// What every row of the report shares.
struct BenchContext {
  const BenchArgs& a;
  ModelFacts facts;
  int n_threads = 0;
  int n_ranks = 1;
  double membw = 0;  // bytes per second (--membw probe); 0 without decode tests
  bool any_decode = false;
  bool expert_cache = false;  // --weights-memory: routed experts streamed through the expert cache
};

// One test's timed repetitions: t/s of each, and the means of the rest.
struct TestResult {
  std::vector<double> tps;
  double mean_tps = 0, sd_tps = 0;
  double weight_bytes = 0, comm_bytes = 0;  // per token
  double gbps = 0;                          // decode tests: weight bytes read per second / 1e9
  std::array<double, kStageCount> stage_s{}, stage_bytes{}, stage_regions{};  // per token
  double regions = 0;
  ExpertCacheRates expert_cache;  // per token
  std::vector<RankStats> ranks;   // every rank's memory and communication after the test
};

TestResult measure(Bencher& bencher, const Test& t, int reps, bool warmup) {
  if (warmup) bencher.run(t);  // cold caches, first-touch faults, scratch growth
  TestResult r;
  std::vector<double> bpt, cpt;
  for (int i = 0; i < reps; ++i) {
    const Sample s = bencher.run(t);
    for (int k = 0; k < kStageCount; ++k) {
      r.stage_s[k] += s.stage_s[k] / reps;
      r.stage_bytes[k] += s.stage_bytes[k] / reps;
      r.stage_regions[k] += s.stage_regions[k] / reps;
    }
    r.regions += s.regions / reps;
    r.expert_cache.add(s.expert_cache, 1.0 / reps);
    r.tps.push_back(s.tps);
    bpt.push_back(s.weight_bytes_per_token);
    cpt.push_back(s.comm_bytes_per_token);
  }
  r.mean_tps = mean_of(r.tps);
  r.sd_tps = sd_of(r.tps);
  r.weight_bytes = mean_of(bpt);
  r.comm_bytes = mean_of(cpt);
  r.gbps = t.n_gen > 0 ? r.weight_bytes * r.mean_tps / 1e9 : 0.0;
  return r;
}

nlohmann::json result_json(const BenchContext& ctx, const Test& t, const TestResult& r) {
  nlohmann::json j = {{"model_filename", ctx.a.model},
                      {"model_type", ctx.facts.description},
                      {"model_size", ctx.facts.size_bytes},
                      {"model_n_params", ctx.facts.n_params},
                      {"n_threads", ctx.n_threads},
                      {"n_prompt", t.n_prompt},
                      {"n_gen", t.n_gen},
                      {"n_depth", t.depth},
                      {"test", t.name()},
                      {"avg_ts", r.mean_tps},
                      {"stddev_ts", r.sd_tps},
                      {"samples_ts", r.tps}};
  j["n_ranks"] = ctx.n_ranks;
  j["comm_bytes_per_token"] = r.comm_bytes;
  j["ranks"] = nlohmann::json::array();
  for (size_t i = 0; i < r.ranks.size(); ++i) {
    const RankStats& x = r.ranks[i];
    j["ranks"].push_back({{"rank", i},
                          {"experts", {x.expert_begin, x.expert_end}},
                          {"heads", {x.head_begin, x.head_end}},
                          {"rss_bytes", x.rss_bytes},
                          {"rss_file_bytes", x.rss_file_bytes},
                          {"rss_anon_bytes", x.rss_anon_bytes},
                          {"model_rss_bytes", x.model_rss_bytes},
                          {"shard_bytes", x.shard_bytes},
                          {"shard_split_bytes", x.shard_split_bytes},
                          {"comm_sent_bytes", x.comm_sent_bytes},
                          {"comm_received_bytes", x.comm_received_bytes},
                          {"expert_bytes", x.expert_bytes}});
  }
  j["stages"] = nlohmann::json::array();
  for (int i = 0; i < kStageCount; ++i)
    j["stages"].push_back({{"stage", kStageNames[i]},
                           {"seconds_per_token", r.stage_s[i]},
                           {"bytes_per_token", r.stage_bytes[i]},
                           {"regions_per_token", r.stage_regions[i]}});
  j["pool_regions_per_token"] = r.regions;
  if (ctx.expert_cache)
    j["expert_cache"] = {{"hits_per_token", r.expert_cache.hits},
                         {"misses_per_token", r.expert_cache.misses},
                         {"bytes_read_per_token", r.expert_cache.bytes_read},
                         {"stall_seconds_per_token", r.expert_cache.stall_s},
                         {"read_ahead_bytes_per_token", r.expert_cache.read_ahead_bytes},
                         {"predictions_per_token", r.expert_cache.predictions},
                         {"predictions_used_per_token", r.expert_cache.predictions_used},
                         {"predictable_uses_per_token", r.expert_cache.predictable_uses}};
  if (t.n_gen > 0) {
    j["weight_bytes_per_token"] = r.weight_bytes;
    j["gbps"] = r.gbps;
    j["membw_gbps"] = ctx.membw / 1e9;
    j["membw_fraction"] = ctx.membw > 0 ? r.gbps * 1e9 / ctx.membw : 0.0;
  }
  return j;
}

void print_table_head(const BenchContext& ctx) {
  if (ctx.any_decode) fmt::print("read bandwidth (--membw): {:.2f} GB/s\n\n", ctx.membw / 1e9);
  fmt::print("| model | size | params | threads | test | t/s |{}\n",
             ctx.any_decode ? " weights/token | GB/s | of membw |" : "");
  fmt::print("| --- | ---: | ---: | ---: | ---: | ---: |{}\n", ctx.any_decode ? " ---: | ---: | ---: |" : "");
}

void print_table_row(const BenchContext& ctx, const Test& t, const TestResult& r) {
  std::string extra;
  if (t.n_gen > 0)
    extra = fmt::format(" {:.1f} MB | {:.2f} | {:.0f}% |", r.weight_bytes / 1e6, r.gbps,
                        ctx.membw > 0 ? 100.0 * r.gbps * 1e9 / ctx.membw : 0.0);
  else if (ctx.any_decode)
    extra = " | | |";
  fmt::print("| {} | {} | {} | {} | {} | {:.2f} ± {:.2f} |{}\n", ctx.facts.description,
             human_bytes(static_cast<double>(ctx.facts.size_bytes)),
             human_params(static_cast<double>(ctx.facts.n_params)), ctx.n_threads, t.name(), r.mean_tps, r.sd_tps,
             extra);
  std::fflush(stdout);
}

void print_rank_table(int n_ranks, const std::vector<std::string>& comm_notes, const std::vector<RankStats>& ranks) {
  fmt::print("\nranks: {}; communication per token (rank 0, sent + received): {}\n", n_ranks,
             fmt::join(comm_notes, ", "));
  fmt::print("| rank | experts | heads | RSS | of it model file | sent | received |\n");
  fmt::print("| ---: | --- | --- | ---: | ---: | ---: | ---: |\n");
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankStats& x = ranks[r];
    fmt::print("| {} | [{}, {}) | [{}, {}) | {} | {} | {} | {} |\n", r, x.expert_begin, x.expert_end, x.head_begin,
               x.head_end, human_bytes(static_cast<double>(x.rss_bytes)),
               human_bytes(static_cast<double>(x.model_rss_bytes)), human_bytes(static_cast<double>(x.comm_sent_bytes)),
               human_bytes(static_cast<double>(x.comm_received_bytes)));
  }
}

// Each test: one warm-up, -r timed repetitions, a row of the table (or a JSON object); then the
// stage profiles (--profile) and every rank's memory and communication.
void run_tests(const BenchContext& ctx, Bencher& bencher, const std::vector<Test>& tests,
               const std::function<std::vector<RankStats>()>& rank_stats) {
  const BenchArgs& a = ctx.a;
  nlohmann::json out = nlohmann::json::array();
  if (!a.json) print_table_head(ctx);
  std::vector<std::string> comm_notes;
  std::vector<RankStats> last_ranks;
  std::vector<StageProfileRow> profiles;
  for (const Test& t : tests) {
    TestResult r = measure(bencher, t, a.reps, a.warmup);
    r.ranks = rank_stats();
    if (a.json) {
      out.push_back(result_json(ctx, t, r));
      continue;
    }
    print_table_row(ctx, t, r);
    comm_notes.push_back(fmt::format("{} {:.1f} KB", t.name(), r.comm_bytes / 1e3));
    last_ranks = r.ranks;
    if (a.profile)
      profiles.push_back({t.name(), 1.0 / r.mean_tps, r.stage_s, r.stage_bytes, r.stage_regions, r.regions,
                          r.expert_cache, ctx.expert_cache});
  }
  if (a.json) {
    fmt::print("{}\n", out.dump(1));
    return;
  }
  for (const StageProfileRow& pr : profiles) print_stage_profile(pr);
  if (!last_ranks.empty()) print_rank_table(ctx.n_ranks, comm_notes, last_ranks);  // none for deepseek4
}

// --membw without -m: the read bandwidth probe alone.
void print_membw(const BenchArgs& a, int n_threads, int64_t probe_bytes) {
  const double bw = measure_read_bandwidth(n_threads, probe_bytes, 5);
  if (a.json)
    fmt::print("{}\n",
               nlohmann::json{{"membw_gbps", bw / 1e9}, {"n_threads", n_threads}, {"bytes", probe_bytes}}.dump());
  else
    fmt::print("read bandwidth: {:.2f} GB/s ({} threads, {} buffer, best of 5)\n", bw / 1e9, n_threads,
               human_bytes(static_cast<double>(probe_bytes)));
}

std::vector<Test> make_tests(const BenchArgs& a) {
  std::vector<Test> tests;
  for (int p : a.n_prompt) {
    if (p < 0) fail("bench: -p values must be >= 0, got {}", p);
    if (p > 0) tests.push_back({p, 0, 0});
  }
  for (int d : a.depth) {
    if (d < 0) fail("bench: -d values must be >= 0, got {}", d);
    for (int n : a.n_gen) {
      if (n < 0) fail("bench: -n values must be >= 0, got {}", n);
      if (n > 0) tests.push_back({0, n, d});
    }
  }
  if (tests.empty()) fail("bench: no tests (all -p and -n values are 0)");
  return tests;
}

// The context the longest test needs: its prompt (at least one token), its decode and one more.
int64_t context_needed(const std::vector<Test>& tests) {
  int64_t need_ctx = 16;
  for (const Test& t : tests) need_ctx = std::max<int64_t>(need_ctx, t.n_prompt + std::max(1, t.depth) + t.n_gen + 1);
  return need_ctx;
}

// The engine flags as bench runs them: one sequence at a time, no prefix caching, a cache of
// whole 256-token blocks that holds the longest test and its drafts.
EngineSetup bench_engine_setup(const BenchArgs& a, int64_t need_ctx) {
  EngineArgs e = a.engine;
  e.max_num_seqs = 1;
  e.enable_prefix_caching = false;
  e.kv_cache_tokens = (need_ctx + parse_speculative_config(e.speculative_config) + 255) / 256 * 256;
  return build_engine_setup(e, a.common, "bench");
}

void bench(const BenchArgs& a) {
  apply_common_options(a.common);
  const int n_threads = resolve_threads(a.engine.threads);
  if (a.reps < 1) fail("bench: -r must be >= 1, got {}", a.reps);
  const int64_t probe_bytes = parse_byte_size(a.membw_size, "--membw-size");
  if (probe_bytes < (1 << 20)) fail("bench: --membw-size must be at least 1M, got '{}'", a.membw_size);
  if (a.membw && a.model.empty()) {
    print_membw(a, n_threads, probe_bytes);
    return;
  }
  if (a.model.empty()) fail("bench: give -m FILE (or --membw alone for the bandwidth probe)");
  if (!a.prefix_reuse.empty()) {
    if (is_deepseek4_file(a.model))
      fail("bench: --prefix-reuse: deepseek4 has no prefix cache (its cache state is per sequence)");
    if (a.prefix_reuse.size() != 2) fail("bench: --prefix-reuse takes P,S (prefix and suffix tokens)");
    EngineArgs e = a.engine;
    e.max_num_seqs = 1;
    prefix_reuse_bench({a.model, a.prefix_reuse[0], a.prefix_reuse[1], a.reps, a.json, a.seed, a.kv_cache_dir},
                       build_engine_setup(e, a.common, "bench"));
    return;
  }
  if (!a.kv_cache_dir.empty()) fail("bench: --kv-cache-dir is for --prefix-reuse");
  const std::vector<Test> tests = make_tests(a);
  const int64_t need_ctx = context_needed(tests);
  EngineSetup setup = bench_engine_setup(a, need_ctx);
  OpenedModel m = open_model(a.model, setup, a.engine, "bench");
  if (!m.runner) return;                  // a worker rank under mpirun: rank 0 has finished
  const ModelRunner& runner = *m.runner;  // lives inside the engine below
  auto* dist = dynamic_cast<DistributedRunner*>(m.deepseek2);
  // Every rank's resident memory and communication so far (one process: this one), between tests.
  auto rank_stats = [&] {
    if (dist) return dist->rank_stats();
    return m.deepseek2 ? std::vector<RankStats>{own_rank_stats(*m.deepseek2, world())} : std::vector<RankStats>{};
  };
  if (runner.max_context() < need_ctx)
    fail("bench: the tests need {} tokens of context, the model allows {}", need_ctx, runner.max_context());
  log_engine_setup(setup);
  BenchContext ctx{a, describe(*m.file), n_threads, world().size()};
  ctx.expert_cache = runner.expert_cache_slots() > 0;
  for (const Test& t : tests) ctx.any_decode |= t.n_gen > 0;
  // The bandwidth probe before the engine starts, so that it has the machine to itself.
  ctx.membw = ctx.any_decode ? measure_read_bandwidth(n_threads, probe_bytes, 5) : 0.0;
  const int n_vocab = runner.n_vocab();
  Engine engine(std::move(m.runner), setup.engine, nullptr);
  if (setup.engine.num_speculative_tokens > 0) {  // (refused for deepseek4)
    spec_bench(engine, *m.deepseek2, n_vocab, ctx.facts, tests, a, setup.engine.num_speculative_tokens);
    return;
  }
  const int64_t routed = m.deepseek4 ? deepseek4_routed_bytes(*m.file, m.deepseek4->config()) : 0;
  Bencher bencher(engine, m.deepseek2, n_vocab, ctx.facts.dense_bytes, a.seed, routed);
  run_tests(ctx, bencher, tests, rank_stats);
}

}  // namespace

void register_bench(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("bench", "Prompt-processing and decode speed through the serving engine (llama-bench style)");
  static BenchArgs a;
  cmd->add_option("-m,--model", a.model, "GGUF file (deepseek2, deepseek32, glm-dsa or deepseek4)");
  cmd->add_option("-p,--n-prompt", a.n_prompt, "Prompt lengths for pp tests (0: none)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("-n,--n-gen", a.n_gen, "Decoded tokens for tg tests (0: none)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("-d,--n-depth", a.depth, "Context depths the tg tests start from (a real prefill first)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("-r,--repetitions", a.reps, "Timed repetitions per test (after one warm-up)")->capture_default_str();
  cmd->add_flag(
      "!--no-warmup", a.warmup,
      "No untimed warm-up repetition (for long depth tests, whose prefill would run twice; the --speculative-config "
      "comparison always warms up)");
  cmd->add_flag("--json", a.json, "Print a JSON array (llama-bench's field names where they exist)");
  cmd->add_flag("--membw", a.membw, "Without -m: only measure the read bandwidth with all threads");
  cmd->add_flag("--profile", a.profile,
                "After the table: each test's time and bytes read per token by forward stage, and the GB/s of each");
  cmd->add_option("--membw-size", a.membw_size, "Buffer the bandwidth probe reads")->capture_default_str();
  cmd->add_option("--seed", a.seed, "Seed of the prompt ids")->capture_default_str();
  cmd->add_option("--prefix-reuse", a.prefix_reuse,
                  "P,S: instead of the tests above, time to first token of P-token shared prefixes with S-token "
                  "suffixes: cold, in the KV cache, in host RAM, on disk after a restart")
      ->delimiter(',');
  cmd->add_option("--kv-cache-dir", a.kv_cache_dir,
                  "With --prefix-reuse: the disk tier's directory (default: a temporary one, removed afterwards)");
  add_engine_args(cmd, a.engine, {.capacity = false});
  cmd->get_option("--speculative-config")
      ->description(R"(Decode tests with and without the model's MTP layer, alternating, greedy: )"
                    R"('{"method": "mtp", "num_speculative_tokens": K}')");
  add_common_options(cmd, a.common);
  cmd->callback([] { bench(a); });
}

}  // namespace mla::cli
