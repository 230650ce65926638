// mla run -m FILE (-p TEXT | --tokens 1,2,3 | --batch FILE) -n N: generation from a deepseek2-family
// or deepseek4 GGUF on the CPU through the serving engine (scheduler, KV blocks, sampler), printing the
// continuations and prefill / decode tokens per second. --batch runs a file of prompts
// concurrently, one request per line.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/engine_args.h"
#include "cli/model_open.h"
#include "doctor/doctor.h"
#include "engine/deepseek2_runner.h"
#include "engine/deepseek4_runner.h"
#include "engine/engine.h"
#include "engine/speculative.h"
#include "engine/text_decoder.h"
#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "kv/kv_manager.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/log.h"

namespace mla::cli {
namespace {

struct RunArgs {
  std::string model;
  std::string prompt;
  std::string tokens;
  std::string batch_file;
  int n_predict = 16;
  double temp = 0;
  int top_k = 0;
  double top_p = 1.0;
  double min_p = 0.0;
  uint64_t seed = 0;
  bool ignore_eos = false;
  bool verify_paths = false;
  std::string dump_logits;
  bool json = false;
  bool warmup = false;
  std::string json_schema_file;  // constrain every request (structured outputs), one of these
  std::string regex;
  std::string grammar_file;
  std::string mtp_logits;  // dump the MTP layer's draft logits of the prompt
  EngineArgs engine;
  CommonOptions common;
};

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

std::vector<int32_t> parse_token_list(const std::string& s, const std::string& where) {
  std::vector<int32_t> out;
  size_t at = 0;
  while (at < s.size()) {
    size_t sep = s.find_first_of(", ", at);
    std::string item = s.substr(at, sep == std::string::npos ? std::string::npos : sep - at);
    at = sep == std::string::npos ? s.size() : sep + 1;
    if (item.empty() && sep != std::string::npos) continue;
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0 || v > INT32_MAX)
      fail("run: {}: '{}' is not a non-negative token id", where, item);
    out.push_back(static_cast<int32_t>(v));
  }
  if (out.empty()) fail("run: {}: no token ids", where);
  return out;
}

struct Job {
  std::string id;
  std::vector<int32_t> prompt;
  SamplingParams params;
};

SamplingParams default_params(const RunArgs& a) {
  SamplingParams p;
  p.max_tokens = a.n_predict;
  p.temperature = static_cast<float>(a.temp);
  p.top_k = a.top_k;
  p.top_p = static_cast<float>(a.top_p);
  p.min_p = static_cast<float>(a.min_p);
  p.seed = a.seed;
  p.ignore_eos = a.ignore_eos;
  return p;
}

std::vector<int32_t> encode_prompt(const Tokenizer* tok, const std::string& text, const std::string& where) {
  if (!tok) fail("run: {}: a text prompt needs a tokenizer, and the model file has none (give token ids)", where);
  EncodeOptions eo;
  eo.add_special = true;
  auto ids = tok->encode(text, eo);
  if (ids.empty()) fail("run: {}: the prompt encodes to no tokens", where);
  return std::vector<int32_t>(ids.begin(), ids.end());
}

// One request per non-empty line that is not a # comment: token ids ("1,2,3" or "1 2 3") or a
// JSON object {"id", "tokens" | "prompt" (text), "max_tokens", "temperature", "top_k", "top_p",
// "min_p", "seed", "n", "stop", "stop_token_ids", "ignore_eos", "logprobs"} overriding the
// command line.
std::vector<Job> read_batch_file(const RunArgs& a, const Tokenizer* tok) {
  std::ifstream in(a.batch_file);
  if (!in) fail("run: cannot read --batch file '{}'", a.batch_file);
  std::vector<Job> jobs;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    const std::string where = fmt::format("{} line {}", a.batch_file, line_no);
    Job job;
    job.id = fmt::format("r{}", jobs.size());
    job.params = default_params(a);
    job.params.seed = a.seed + jobs.size();  // distinct streams for identical prompts
    if (line[first] != '{') {
      job.prompt = parse_token_list(line.substr(first, line.find_last_not_of(" \t\r") - first + 1), where);
    } else {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
        if (j.contains("tokens"))
          job.prompt = j["tokens"].get<std::vector<int32_t>>();
        else if (j.contains("prompt"))
          job.prompt = encode_prompt(tok, j["prompt"].get<std::string>(), where);
        else
          fail("run: {}: the object has neither \"tokens\" nor \"prompt\"", where);
        SamplingParams& p = job.params;
        if (j.contains("id")) job.id = j["id"].get<std::string>();
        if (j.contains("max_tokens")) p.max_tokens = j["max_tokens"].get<int>();
        if (j.contains("temperature")) p.temperature = j["temperature"].get<float>();
        if (j.contains("top_k")) p.top_k = j["top_k"].get<int>();
        if (j.contains("top_p")) p.top_p = j["top_p"].get<float>();
        if (j.contains("min_p")) p.min_p = j["min_p"].get<float>();
        if (j.contains("seed")) p.seed = j["seed"].get<uint64_t>();
        if (j.contains("n")) p.n = j["n"].get<int>();
        if (j.contains("stop")) p.stop = j["stop"].get<std::vector<std::string>>();
        if (j.contains("stop_token_ids")) p.stop_token_ids = j["stop_token_ids"].get<std::vector<int32_t>>();
        if (j.contains("ignore_eos")) p.ignore_eos = j["ignore_eos"].get<bool>();
        if (j.contains("logprobs")) p.logprobs = j["logprobs"].get<int>();
      } catch (const nlohmann::json::exception& e) {
        fail("run: {}: {}", where, e.what());
      }
    }
    jobs.push_back(std::move(job));
  }
  if (jobs.empty()) fail("run: --batch file '{}' has no prompts", a.batch_file);
  return jobs;
}

struct Collected {
  std::vector<std::vector<int32_t>> tokens;  // per sequence index
  std::vector<std::string> text;
  std::vector<std::string> finish;
  std::string error;
  std::optional<Clock::time_point> first_token;
};

// What one run measured: each request's outputs, and the clock split at the step after which
// every request had its first token (before it: prefill; from it on: decode).
struct RunOutcome {
  std::map<std::string, Collected> results;
  Clock::time_point t0, t_all_first, t_end;
  int64_t decode_tokens = 0;  // tokens made in the steps after t_all_first
};

// --verify-paths' judgement of the whole run: the model's log of the reruns and what it was held to.
struct VerifyVerdict {
  const PathVerifyLog* log = nullptr;  // null for deepseek4
  const Ds4VerifyLog* ds4 = nullptr;   // deepseek4's log (its JSON: verify_json)
  PathTolerances tol{};
  int64_t worst = 0;  // the layer whose attention output differed most
  double worst_rel = 0;
  bool ok = true;
  std::string line;  // "ok (...)" or "FAIL: ..."
};

// Everything the report prints, after the run.
struct RunReport {
  std::vector<Job> jobs;
  RunOutcome outcome;
  EngineCounters counters;  // this run's, without the warm-up request
  int n_spec = 0;
  bool has_text = false;  // the model file has a tokenizer
  std::optional<VerifyVerdict> verify;
};

void check_run_args(const RunArgs& a) {
  if (a.n_predict < 1) fail("run: -n must be >= 1, got {}", a.n_predict);
  const int n_sources = !a.prompt.empty() + !a.tokens.empty() + !a.batch_file.empty();
  if (n_sources != 1) fail("run: give exactly one of -p TEXT, --tokens 1,2,3 or --batch FILE");
  const bool batch = !a.batch_file.empty();
  if (batch && !a.dump_logits.empty()) fail("run: --dump-logits works with a single prompt, not --batch");
  if (a.warmup && !a.dump_logits.empty()) fail("run: --warmup and --dump-logits do not go together");
  if (batch && !a.mtp_logits.empty()) fail("run: --mtp-logits works with a single prompt, not --batch");
}

std::vector<Job> make_jobs(const RunArgs& a, const Tokenizer* tok) {
  if (!a.batch_file.empty()) return read_batch_file(a, tok);
  if (!a.prompt.empty()) return {{"run", encode_prompt(tok, a.prompt, "-p"), default_params(a)}};
  return {{"run", parse_token_list(a.tokens, "--tokens"), default_params(a)}};
}

// Structured outputs: every request constrained by one grammar (for measuring its cost).
void constrain_jobs(const RunArgs& a, const Tokenizer* tok, const OpenedModel& model, int n_threads,
                    std::vector<Job>& jobs) {
  const int n_constraints = !a.json_schema_file.empty() + !a.regex.empty() + !a.grammar_file.empty();
  if (n_constraints > 1) fail("run: give at most one of --json-schema, --regex, --grammar");
  if (n_constraints == 0) return;
  if (!tok) fail("run: a grammar needs the model file's tokenizer, and it has none");
  GrammarSpec spec = !a.regex.empty() ? GrammarSpec::regex(a.regex)
                     : !a.grammar_file.empty()
                         ? GrammarSpec::ebnf(read_text_file(a.grammar_file, "--grammar"))
                         : GrammarSpec::json_schema(read_text_file(a.json_schema_file, "--json-schema"));
  GrammarCompiler compiler(grammar_vocab(*tok), model.runner->n_vocab(), model.eos_ids, n_threads);
  auto grammar = compiler.compile(spec);
  for (Job& job : jobs) job.params.grammar = grammar;
}

using FilePtr = std::unique_ptr<std::FILE, int (*)(std::FILE*)>;

// --mtp-logits, before the engine uses the cache: one prefill of the prompt, then its MTP rows.
void write_mtp_logits(const std::string& path, Deepseek2Runner& runner, const std::vector<int32_t>& prompt,
                      MlaPathPolicy policy) {
  const std::vector<float> rows = runner.mtp_prompt_logits(prompt, policy);
  const FilePtr fp(std::fopen(path.c_str(), "wb"), std::fclose);
  if (!fp || std::fwrite(rows.data(), sizeof(float), rows.size(), fp.get()) != rows.size())
    fail("run: cannot write '{}'", path);
  log().info("mtp logits: {} rows x {} written to {}", prompt.size() - 1, runner.config().n_vocab, path);
}

// --dump-logits: every row of logits the engine computes, appended to the file in order.
FilePtr dump_logits_to(const std::string& path, EngineConfig& ec) {
  FilePtr dump(nullptr, std::fclose);
  if (path.empty()) return dump;
  dump.reset(std::fopen(path.c_str(), "wb"));
  if (!dump) fail("run: cannot write '{}'", path);
  ec.all_logits = true;
  ec.on_logits = [fp = dump.get(), path](const std::string&, int, int, std::span<const float> row) {
    if (std::fwrite(row.data(), sizeof(float), row.size(), fp) != row.size()) fail("run: short write to '{}'", path);
  };
  return dump;
}

// --warmup: one untimed request as long as the first prompt, every id moved by one (so the prefix
// cache cannot serve the real prompt from it), as llama-bench warms up before it measures: the
// first forward pass of a process pays for cold caches and first-touch page faults. Returns the
// counters after it, to subtract.
EngineCounters warm_up(Engine& engine, const Job& first, int32_t n_vocab) {
  std::vector<int32_t> ids = first.prompt;
  for (int32_t& id : ids) id = (id + 1) % n_vocab;
  SamplingParams wp;
  wp.max_tokens = std::min(2, first.params.max_tokens);
  wp.ignore_eos = true;
  engine.add_request("warmup", std::move(ids), wp, [](RequestOutput&&) {});
  while (engine.has_unfinished()) engine.step();
  return engine.counters();
}

// Drives the engine on this thread until every job has finished; a step's tokens count as decode
// once every request has its first token (all prompts computed).
void generate(Engine& engine, const std::vector<Job>& jobs, RunOutcome& out) {
  for (const Job& job : jobs) {
    Collected& col = out.results[job.id];
    col.tokens.resize(job.params.n);
    col.text.resize(job.params.n);
    col.finish.resize(job.params.n);
    engine.add_request(job.id, job.prompt, job.params, [&col](RequestOutput&& o) {
      for (auto& s : o.outputs) {
        if (!col.first_token && !s.token_ids.empty()) col.first_token = Clock::now();
        col.tokens[s.index].insert(col.tokens[s.index].end(), s.token_ids.begin(), s.token_ids.end());
        col.text[s.index] += s.text;
        if (s.finish_reason) col.finish[s.index] = std::string(to_string(*s.finish_reason));
      }
      if (!o.error.empty()) col.error = o.error;
    });
  }
  out.t0 = out.t_all_first = out.t_end = Clock::now();
  bool all_first = false;
  while (engine.has_unfinished()) {
    const int64_t before = engine.counters().n_generation_tokens;
    engine.step();
    out.t_end = Clock::now();
    if (all_first) {
      out.decode_tokens += engine.counters().n_generation_tokens - before;
      continue;
    }
    all_first = std::all_of(out.results.begin(), out.results.end(),
                            [](const auto& r) { return r.second.first_token.has_value(); });
    if (all_first) out.t_all_first = out.t_end;
  }
  for (const auto& [id, col] : out.results)
    if (!col.error.empty()) fail("run: request {}: {}", id, col.error);
}

// --verify-paths: the model reran every step down the other paths; judged by the doctor's
// path-check tolerances (logits, each layer's attention output) and its greedy rule, so this
// fails where `mla doctor` would.
VerifyVerdict judge_verify_paths(const Deepseek2Runner& runner, GgmlType kv_dtype) {
  VerifyVerdict r;
  const PathVerifyLog& v = runner.verify_log();
  r.log = &v;
  DoctorOptions dopt;
  dopt.kv_dtype = kv_dtype;
  dopt.exact_attention = runner.exact_attention();
  r.tol = path_tolerances(runner.weights(), dopt);
  for (size_t l = 0; l < v.layer_rel.size(); ++l)
    if (v.layer_rel[l] > v.layer_rel[r.worst]) r.worst = static_cast<int64_t>(l);
  r.worst_rel = v.layer_rel.empty() ? 0.0 : v.layer_rel[r.worst];
  std::string why;
  if (!v.greedy_agree())
    why = "greedy tokens differ";
  else if (!(v.max_logits_rel() <= r.tol.logits))
    why = fmt::format("logits differ by {:.2e} (tolerance {:.0e})", v.max_logits_rel(), r.tol.logits);
  else if (!(r.worst_rel <= r.tol.layer))
    why = fmt::format("blk.{} attention differs by {:.2e} (tolerance {:.0e})", r.worst, r.worst_rel, r.tol.layer);
  r.ok = why.empty();
  r.line =
      r.ok ? fmt::format("ok (over {} steps: logits <= {:.2e}, layers <= {:.2e} at blk.{}; tolerances {:.0e} / {:.0e})",
                         v.steps.size(), v.max_logits_rel(), r.worst_rel, r.worst, r.tol.logits, r.tol.layer)
           : "FAIL: " + why;
  return r;
}

// deepseek4's --verify-paths: each chunk rerun with dense CSA where top-k keeps every entry
// (Deepseek4Runner::verify_log), held to the doctor's sparse-vs-dense tolerance and greedy rule.
VerifyVerdict judge_verify_dense(const Deepseek4Runner& runner) {
  VerifyVerdict r;
  const Ds4VerifyLog& v = runner.verify_log();
  r.tol.logits = kDoctorSparseDenseTol;
  const std::string counts = fmt::format("{} chunks compared, {} past top_k {} not compared", v.n_compared,
                                         v.n_beyond_top_k, runner.config().indexer_top_k);
  if (!runner.verifies())
    r.line = "ok (n/a: no CSA layer, so no sparse vs dense selection to compare)";
  else if (!v.greedy_agree)
    r.ok = false, r.line = fmt::format("FAIL: sparse vs dense CSA: greedy tokens differ ({})", counts);
  else if (!(v.max_logits_rel <= r.tol.logits))
    r.ok = false, r.line = fmt::format("FAIL: sparse vs dense CSA: logits differ by {:.2e} (tolerance {:.0e}; {})",
                                       v.max_logits_rel, r.tol.logits, counts);
  else
    r.line = fmt::format("ok (sparse vs dense CSA: logits <= {:.2e}, tolerance {:.0e}; {})", v.max_logits_rel,
                         r.tol.logits, counts);
  r.ds4 = &v;
  return r;
}

// The verdict as `verify_paths` in --json: per-step values, per-layer maxima, tolerances.
nlohmann::json verify_json(const VerifyVerdict& r) {
  if (r.ds4) {
    const Ds4VerifyLog& v = *r.ds4;
    return {{"ok", r.ok},
            {"verdict", r.line},
            {"max_logits_rel", std::isfinite(v.max_logits_rel) ? nlohmann::json(v.max_logits_rel) : "inf"},
            {"greedy_agree", v.greedy_agree},
            {"chunks_compared", v.n_compared},
            {"chunks_beyond_top_k", v.n_beyond_top_k},
            {"tol_logits", r.tol.logits}};
  }
  const PathVerifyLog& v = *r.log;
  auto finite = [](double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json("inf"); };
  nlohmann::json steps = nlohmann::json::array();
  for (size_t i = 0; i < v.steps.size(); ++i)
    steps.push_back({{"step", i},
                     {"tokens", v.steps[i].n_tokens},
                     {"logits_rel", finite(v.steps[i].logits_rel)},
                     {"greedy_agree", v.steps[i].greedy_agree},
                     {"worst_layer", v.steps[i].worst_layer},
                     {"worst_layer_rel", finite(v.steps[i].worst_layer_rel)}});
  nlohmann::json layers = nlohmann::json::array();
  for (double x : v.layer_rel) layers.push_back(finite(x));
  return {{"ok", r.ok},
          {"verdict", r.line},
          {"max_logits_rel", finite(v.max_logits_rel())},
          {"greedy_agree", v.greedy_agree()},
          {"worst_layer", r.worst},
          {"max_layer_rel", finite(r.worst_rel)},
          {"layer_rel", layers},
          {"tol_logits", r.tol.logits},
          {"tol_layer", r.tol.layer},
          {"steps", steps}};
}

struct Throughput {
  double prefill_s, decode_s, prefill_tps, decode_tps;
};

Throughput throughput(const RunReport& r) {
  const RunOutcome& o = r.outcome;
  Throughput t{};
  t.prefill_s = seconds(o.t0, o.t_all_first);
  t.decode_s = seconds(o.t_all_first, o.t_end);
  t.prefill_tps = r.counters.n_prompt_tokens / std::max(t.prefill_s, 1e-9);
  t.decode_tps = o.decode_tokens > 0 ? o.decode_tokens / std::max(t.decode_s, 1e-9) : 0.0;
  return t;
}

void add_timing(const RunArgs& a, const RunReport& r, nlohmann::json& j) {
  const Throughput t = throughput(r);
  const EngineCounters& c = r.counters;
  j["prefill_tokens"] = c.n_prompt_tokens;
  j["prefill_seconds"] = t.prefill_s;
  j["prefill_tokens_per_second"] = t.prefill_tps;
  j["decode_tokens"] = r.outcome.decode_tokens;
  j["decode_seconds"] = t.decode_s;
  j["decode_tokens_per_second"] = t.decode_tps;
  j["mla_path"] = a.engine.mla_path;
  j["tokens_mha"] = c.n_tokens_mha;  // as the model counted the paths it took
  j["tokens_mqa"] = c.n_tokens_mqa;
  if (r.verify) j["verify_paths"] = verify_json(*r.verify);
  if (r.n_spec > 0) {
    j["spec_tokens"] = r.n_spec;
    j["spec_drafts"] = c.n_spec_drafts;
    j["spec_draft_tokens"] = c.n_spec_draft_tokens;
    j["spec_accepted_tokens"] = c.n_spec_accepted_tokens;
    j["spec_accepted_per_pos"] = c.n_spec_accepted_per_pos;
    j["steps"] = c.n_steps;
  }
}

// The text report's last lines: prefill and decode speed, speculation (acceptance rate = accepted /
// drafted; mean accepted length = tokens per verify step, the accepted drafts plus the target's own
// token), the --verify-paths verdict.
void print_speed_lines(const RunReport& r, const std::string& decode_extra) {
  const Throughput t = throughput(r);
  const EngineCounters& c = r.counters;
  fmt::print("prefill: {} tokens in {:.3f} s ({:.1f} tokens/s)\n", c.n_prompt_tokens, t.prefill_s, t.prefill_tps);
  fmt::print("decode:  {} tokens in {:.3f} s ({:.1f} tokens/s{})\n", r.outcome.decode_tokens, t.decode_s, t.decode_tps,
             decode_extra);
  if (r.n_spec > 0) {
    const SpecAcceptance acc = spec_acceptance(c.n_spec_drafts, c.n_spec_draft_tokens, c.n_spec_accepted_tokens);
    fmt::print(
        "speculative (mtp, k={}): {} drafts, {} of {} draft tokens accepted ({:.1f}%), mean accepted length "
        "{:.2f}, per position {}\n",
        r.n_spec, c.n_spec_drafts, c.n_spec_accepted_tokens, c.n_spec_draft_tokens, 100.0 * acc.rate, acc.mean_len,
        fmt::join(c.n_spec_accepted_per_pos, " "));
  }
  if (r.verify) fmt::print("verify-paths: {}\n", r.verify->line);
}

// --weights-memory: the expert cache's counters (docs/WEIGHTS_MEMORY.md).
void add_expert_cache(const EngineCounters& c, nlohmann::json& j) {
  if (c.expert_cache_slots == 0) return;
  j["expert_cache"] = {{"slots", c.expert_cache_slots},
                       {"hits", c.n_expert_cache_hits},
                       {"misses", c.n_expert_cache_misses},
                       {"bytes_read", c.expert_cache_bytes_read},
                       {"stall_seconds", c.expert_cache_stall_seconds},
                       {"read_ahead", c.n_expert_cache_read_ahead},
                       {"read_ahead_bytes", c.expert_cache_read_ahead_bytes},
                       {"predictions", c.n_expert_cache_predictions},
                       {"predictions_used", c.n_expert_cache_predictions_used},
                       {"predictable_uses", c.n_expert_cache_predictable_uses}};
}

void print_single(const RunArgs& a, const RunReport& r) {
  const Collected& col = r.outcome.results.at("run");
  if (a.json) {
    nlohmann::json j;
    j["prompt"] = r.jobs[0].prompt;
    j["continuation"] = col.tokens[0];
    if (r.has_text) j["text"] = col.text[0];
    j["finish_reason"] = col.finish[0];
    add_timing(a, r, j);
    add_expert_cache(r.counters, j);
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print("continuation ids: {}\n", fmt::join(col.tokens[0], " "));
  if (r.has_text) fmt::print("continuation: {}\n", col.text[0]);
  print_speed_lines(r, "");
}

void print_batch(const RunArgs& a, const RunReport& r) {
  const EngineCounters& c = r.counters;
  int n_seqs = 0;
  for (const Job& j : r.jobs) n_seqs += j.params.n;
  const double prefix_rate = c.n_prefix_queries > 0 ? static_cast<double>(c.n_prefix_hits) / c.n_prefix_queries : 0.0;
  if (a.json) {
    nlohmann::json j;
    j["requests"] = nlohmann::json::array();
    for (const Job& job : r.jobs) {
      const Collected& col = r.outcome.results.at(job.id);
      for (int i = 0; i < job.params.n; ++i) {
        nlohmann::json x = {{"id", job.id},
                            {"index", i},
                            {"prompt_tokens", job.prompt.size()},
                            {"continuation", col.tokens[i]},
                            {"finish_reason", col.finish[i]}};
        if (r.has_text) x["text"] = col.text[i];
        j["requests"].push_back(std::move(x));
      }
    }
    j["n_sequences"] = n_seqs;
    add_timing(a, r, j);
    j["generated_tokens"] = c.n_generation_tokens;
    j["steps"] = c.n_steps;
    j["preemptions"] = c.n_preemptions;
    j["prefix_cache_hit_rate"] = prefix_rate;
    j["forward_seconds"] = c.forward_seconds;
    j["grammar_masks"] = c.n_masks;
    j["mask_wait_seconds"] = c.mask_wait_seconds;
    add_expert_cache(c, j);
    fmt::print("{}\n", j.dump());
    return;
  }
  for (const Job& job : r.jobs) {
    const Collected& col = r.outcome.results.at(job.id);
    for (int i = 0; i < job.params.n; ++i)
      fmt::print("[{}{}] {} tokens ({}): {}\n", job.id, job.params.n > 1 ? fmt::format(".{}", i) : "",
                 col.tokens[i].size(), col.finish[i], fmt::join(col.tokens[i], " "));
  }
  fmt::print("sequences: {}, steps: {}, preemptions: {}, prefix cache hits: {:.1f}%\n", n_seqs, c.n_steps,
             c.n_preemptions, 100.0 * prefix_rate);
  print_speed_lines(r, fmt::format(", {} sequences", n_seqs));
}

void run(const RunArgs& a) {
  apply_common_options(a.common);
  check_run_args(a);
  EngineSetup setup = build_engine_setup(a.engine, a.common, "run", !a.mtp_logits.empty());
  setup.model.verify_paths = a.verify_paths;
  const auto t_load = Clock::now();
  OpenedModel m = open_model(a.model, setup, a.engine, "run");
  if (!m.runner) return;  // a worker rank under mpirun: rank 0 has finished
  log_engine_setup(setup);
  log().info("loaded {} in {:.2f} s: {}, {} threads", a.model, seconds(t_load, Clock::now()), m.summary,
             setup.model.n_threads);

  // The tokenizer, when the file carries a byte-level BPE vocabulary: text prompts and text output.
  std::shared_ptr<const Tokenizer> tok;
  if (m.file->opt_string("tokenizer.ggml.model") == std::optional<std::string>("gpt2"))
    tok = Tokenizer::from_gguf(*m.file);
  RunReport r;
  r.jobs = make_jobs(a, tok.get());
  r.has_text = tok != nullptr;
  constrain_jobs(a, tok.get(), m, setup.model.n_threads, r.jobs);
  // (open_model refused --mtp-logits for deepseek4.)
  if (!a.mtp_logits.empty()) write_mtp_logits(a.mtp_logits, *m.deepseek2, r.jobs.front().prompt, setup.policy);

  setup.engine.eos_token_ids = m.eos_ids;
  const FilePtr dump = dump_logits_to(a.dump_logits, setup.engine);
  const auto n_vocab = static_cast<int32_t>(m.runner->n_vocab());
  Engine engine(std::move(m.runner), setup.engine, tok ? std::make_shared<TokenizerDecoder>(tok) : nullptr);
  const EngineCounters base = a.warmup ? warm_up(engine, r.jobs.front(), n_vocab) : EngineCounters{};
  generate(engine, r.jobs, r.outcome);
  r.counters = engine.counters() - base;
  r.n_spec = setup.engine.num_speculative_tokens;
  if (a.verify_paths) {
    r.verify = m.deepseek4 ? judge_verify_dense(*m.deepseek4) : judge_verify_paths(*m.deepseek2, setup.kv.dtype);
    log().info("verify-paths: {}", r.verify->line);
    if (!r.verify->ok) exit_code() = 1;  // a FAIL makes the exit status 1
  }
  if (a.batch_file.empty())
    print_single(a, r);
  else
    print_batch(a, r);
}

}  // namespace

void register_run(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Generate from a GGUF on the CPU through the serving engine");
  static RunArgs a;
  cmd->add_option("-m,--model", a.model, "GGUF file (deepseek2, deepseek32, glm-dsa or deepseek4)")->required();
  cmd->add_option("-p,--prompt", a.prompt, "Prompt text (the model file's tokenizer; BOS added as it says)");
  cmd->add_option("--tokens", a.tokens, "Prompt as comma-separated token ids");
  cmd->add_option("--batch", a.batch_file,
                  "File of prompts run concurrently, one per line: token ids, or a JSON object with \"tokens\" "
                  "and sampling fields");
  cmd->add_option("-n,--n-predict", a.n_predict, "Tokens to generate (max_tokens)")->capture_default_str();
  cmd->add_option("--temp", a.temp, "Sampling temperature; 0 is greedy")->capture_default_str();
  cmd->add_option("--top-k", a.top_k, "Top-k (0: off)")->capture_default_str();
  cmd->add_option("--top-p", a.top_p, "Top-p (1: off)")->capture_default_str();
  cmd->add_option("--min-p", a.min_p, "Min-p (0: off)")->capture_default_str();
  cmd->add_option("--seed", a.seed, "Sampling seed (--batch: request i uses seed + i)")->capture_default_str();
  cmd->add_flag("--ignore-eos", a.ignore_eos, "Keep generating past the end-of-sequence token");
  cmd->add_flag("--verify-paths", a.verify_paths,
                "Rerun every step end to end with each sequence down the other MLA path (same weights, kernels and "
                "inputs) and compare each layer's attention output and the logits; exits 1 where `mla doctor`'s "
                "path check would fail. deepseek4: each chunk rerun with CSA over every entry, compared where the "
                "indexer's top-k keeps them all");
  cmd->add_option("--dump-logits", a.dump_logits,
                  "Write the F32 logits of every processed position (prompt, then each fed-back token) to FILE");
  cmd->add_flag("--json", a.json, "Print the result as one JSON object");
  cmd->add_option("--json-schema", a.json_schema_file,
                  "Constrain every output to JSON valid under the JSON Schema in this file");
  cmd->add_option("--regex", a.regex, "Constrain every output to match this regular expression");
  cmd->add_option("--grammar", a.grammar_file, "Constrain every output to the EBNF grammar (rule 'root') in this file");
  cmd->add_option("--mtp-logits", a.mtp_logits,
                  "Write the MTP layer's draft logits of the prompt (raw float32, one row per position 1..n-1: row p "
                  "from the trunk's state at p and token p + 1) before generating");
  cmd->add_flag("--warmup", a.warmup,
                "Run one untimed request of the first prompt's length first (as llama-bench does)");
  add_engine_args(cmd, a.engine);
  add_common_options(cmd, a.common);
  cmd->callback([] { run(a); });
}

}  // namespace mla::cli
