// mla run -m FILE (-p TEXT | --tokens 1,2,3 | --batch FILE) -n N: generation from a deepseek2 GGUF
// on the CPU through the serving engine (scheduler, paged latent cache, sampler), printing the
// continuations and prefill / decode tokens per second. --batch runs a file of prompts
// concurrently, one request per line.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/commands.h"
#include "cli/common.h"
#include "doctor/doctor.h"
#include "engine/deepseek2_runner.h"
#include "engine/engine.h"
#include "engine/speculative.h"
#include "engine/text_decoder.h"
#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "kv/kv_manager.h"
#include "parallel/dist_runner.h"
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
  std::string mla_path = "auto";
  bool verify_paths = false;
  int threads = 0;
  int max_num_batched_tokens = 512;
  int max_num_seqs = 64;
  std::string kv_dtype = "f16";
  int64_t kv_tokens = 0;
  std::string kv_memory;
  int block_size = 16;
  bool no_prefix_cache = false;
  std::string dump_logits;
  bool json = false;
  bool warmup = false;
  std::string json_schema_file;  // constrain every request (structured outputs), one of these
  std::string regex;
  std::string grammar_file;
  std::string speculative_config;  // {"method": "mtp", "num_speculative_tokens": K}
  std::string mtp_logits;          // dump the MTP layer's draft logits of the prompt
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

void run(const RunArgs& a) {
  apply_common_options(a.common);
  if (a.n_predict < 1) fail("run: -n must be >= 1, got {}", a.n_predict);
  const int n_sources = !a.prompt.empty() + !a.tokens.empty() + !a.batch_file.empty();
  if (n_sources != 1) fail("run: give exactly one of -p TEXT, --tokens 1,2,3 or --batch FILE");
  const bool batch = !a.batch_file.empty();
  if (batch && !a.dump_logits.empty()) fail("run: --dump-logits works with a single prompt, not --batch");
  if (a.warmup && !a.dump_logits.empty()) fail("run: --warmup and --dump-logits do not go together");

  const MlaPathPolicy policy = parse_mla_path_policy(a.mla_path);
  ModelOptions mo;
  mo.n_threads = a.threads > 0 ? a.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  mo.max_batch_tokens = a.max_num_batched_tokens;
  mo.dsa = dsa_enabled(a.common);
  mo.verify_paths = a.verify_paths;
  const int n_spec = apply_speculative_config(a.speculative_config, !a.mtp_logits.empty(), a.max_num_seqs,
                                              "run: speculative decoding (--speculative-config, --mtp-logits)", mo);
  if (!a.mtp_logits.empty() && batch) fail("run: --mtp-logits works with a single prompt, not --batch");
  KvCacheOptions kvo;
  kvo.dtype = parse_cache_dtype(a.kv_dtype);
  kvo.block_size = a.block_size;
  kvo.tokens = a.kv_tokens;
  if (!a.kv_memory.empty()) kvo.memory_bytes = parse_byte_size(a.kv_memory, "--kv-cache-memory");
  if (kvo.tokens > 0 && kvo.memory_bytes > 0) fail("run: give --kv-cache-tokens or --kv-cache-memory, not both");

  const auto t_load = Clock::now();
  auto runner = open_runner(a.model, policy, mo, kvo);
  if (!runner) return;  // a worker rank under mpirun: rank 0 has finished
  const DeepseekConfig& c = runner->config();
  log().info("loaded {} in {:.2f} s: {} layers, {} heads, kv_lora_rank {}, {} experts (top {}), vocab {}, {} threads",
             a.model, seconds(t_load, Clock::now()), c.n_layer, c.n_head, c.kv_lora_rank, c.n_expert, c.n_expert_used,
             c.n_vocab, mo.n_threads);

  // The tokenizer, when the file carries a byte-level BPE vocabulary: text prompts and text output.
  std::shared_ptr<const Tokenizer> tok;
  if (runner->file().opt_string("tokenizer.ggml.model") == std::optional<std::string>("gpt2"))
    tok = Tokenizer::from_gguf(runner->file());
  std::vector<Job> jobs;
  if (batch) {
    jobs = read_batch_file(a, tok.get());
  } else if (!a.prompt.empty()) {
    jobs.push_back({"run", encode_prompt(tok.get(), a.prompt, "-p"), default_params(a)});
  } else {
    jobs.push_back({"run", parse_token_list(a.tokens, "--tokens"), default_params(a)});
  }

  // Structured outputs: every request constrained by one grammar (for measuring its cost).
  const int n_constraints = !a.json_schema_file.empty() + !a.regex.empty() + !a.grammar_file.empty();
  if (n_constraints > 1) fail("run: give at most one of --json-schema, --regex, --grammar");
  if (n_constraints == 1) {
    if (!tok) fail("run: a grammar needs the model file's tokenizer, and it has none");
    GrammarSpec spec = !a.regex.empty() ? GrammarSpec::regex(a.regex)
                       : !a.grammar_file.empty()
                           ? GrammarSpec::ebnf(read_text_file(a.grammar_file, "--grammar"))
                           : GrammarSpec::json_schema(read_text_file(a.json_schema_file, "--json-schema"));
    GrammarCompiler compiler(grammar_vocab(*tok), static_cast<int>(c.n_vocab), runner->eos_token_ids(), mo.n_threads);
    auto grammar = compiler.compile(spec);
    for (Job& job : jobs) job.params.grammar = grammar;
  }

  if (!a.mtp_logits.empty()) {
    // Before the engine uses the cache: one prefill of the prompt, then its MTP rows.
    const std::vector<float> rows = runner->mtp_prompt_logits(jobs.front().prompt, policy);
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> fp(std::fopen(a.mtp_logits.c_str(), "wb"), std::fclose);
    if (!fp || std::fwrite(rows.data(), sizeof(float), rows.size(), fp.get()) != rows.size())
      fail("run: cannot write '{}'", a.mtp_logits);
    log().info("mtp logits: {} rows x {} written to {}", jobs.front().prompt.size() - 1, c.n_vocab, a.mtp_logits);
  }

  EngineConfig ec;
  ec.num_speculative_tokens = n_spec;
  ec.max_num_batched_tokens = a.max_num_batched_tokens;
  ec.max_num_seqs = a.max_num_seqs;
  ec.enable_prefix_caching = !a.no_prefix_cache;
  ec.path_policy = policy;
  ec.eos_token_ids = runner->eos_token_ids();
  std::FILE* dump = nullptr;
  if (!a.dump_logits.empty()) {
    dump = std::fopen(a.dump_logits.c_str(), "wb");
    if (!dump) fail("run: cannot write '{}'", a.dump_logits);
    ec.all_logits = true;
    ec.on_logits = [dump, &a](const std::string&, int, int, std::span<const float> row) {
      if (std::fwrite(row.data(), sizeof(float), row.size(), dump) != row.size())
        fail("run: short write to '{}'", a.dump_logits);
    };
  }
  const int32_t n_vocab = static_cast<int32_t>(c.n_vocab);
  const Deepseek2Runner& model_runner = *runner;  // owned by the engine from here on
  Engine engine(std::move(runner), ec, tok ? std::make_shared<TokenizerDecoder>(tok) : nullptr);

  // --warmup: one untimed request as long as the first prompt, every id moved by one (so the prefix
  // cache cannot serve the real prompt from it), as llama-bench warms up before it measures: the
  // first forward pass of a process pays for cold caches and first-touch page faults.
  EngineCounters base{};
  if (a.warmup) {
    std::vector<int32_t> ids = jobs.front().prompt;
    for (int32_t& id : ids) id = (id + 1) % n_vocab;
    SamplingParams wp;
    wp.max_tokens = std::min(2, jobs.front().params.max_tokens);
    wp.ignore_eos = true;
    engine.add_request("warmup", std::move(ids), wp, [](RequestOutput&&) {});
    while (engine.has_unfinished()) engine.step();
    base = engine.counters();
  }

  std::map<std::string, Collected> results;
  for (const Job& job : jobs) {
    Collected& col = results[job.id];
    col.tokens.resize(job.params.n);
    col.text.resize(job.params.n);
    col.finish.resize(job.params.n);
    engine.add_request(job.id, job.prompt, job.params, [&col](RequestOutput&& out) {
      for (auto& o : out.outputs) {
        if (!col.first_token && !o.token_ids.empty()) col.first_token = Clock::now();
        col.tokens[o.index].insert(col.tokens[o.index].end(), o.token_ids.begin(), o.token_ids.end());
        col.text[o.index] += o.text;
        if (o.finish_reason) col.finish[o.index] = std::string(to_string(*o.finish_reason));
      }
      if (!out.error.empty()) col.error = out.error;
    });
  }

  // Drive the engine on this thread; a step's tokens count as decode once every request has its
  // first token (all prompts computed).
  const auto t0 = Clock::now();
  Clock::time_point t_all_first = t0, t_end = t0;
  int64_t decode_tokens = 0;
  bool all_first = false;
  while (engine.has_unfinished()) {
    const int64_t before = engine.counters().n_generation_tokens;
    engine.step();
    t_end = Clock::now();
    const int64_t made = engine.counters().n_generation_tokens - before;
    if (all_first) decode_tokens += made;
    if (!all_first) {
      all_first = true;
      for (const auto& [id, col] : results) all_first = all_first && col.first_token.has_value();
      if (all_first) t_all_first = t_end;
    }
  }
  if (dump) std::fclose(dump);
  EngineCounters counters = engine.counters();  // this run's, without the warm-up request
  counters.n_prompt_tokens -= base.n_prompt_tokens;
  counters.n_generation_tokens -= base.n_generation_tokens;
  counters.n_steps -= base.n_steps;
  counters.n_preemptions -= base.n_preemptions;
  counters.n_prefix_queries -= base.n_prefix_queries;
  counters.n_prefix_hits -= base.n_prefix_hits;
  counters.n_tokens_mha -= base.n_tokens_mha;
  counters.n_tokens_mqa -= base.n_tokens_mqa;
  counters.forward_seconds -= base.forward_seconds;
  counters.n_spec_drafts -= base.n_spec_drafts;
  counters.n_spec_draft_tokens -= base.n_spec_draft_tokens;
  counters.n_spec_accepted_tokens -= base.n_spec_accepted_tokens;
  for (size_t i = 0; i < counters.n_spec_accepted_per_pos.size(); ++i)
    counters.n_spec_accepted_per_pos[i] -= base.n_spec_accepted_per_pos.empty() ? 0 : base.n_spec_accepted_per_pos[i];
  for (const auto& [id, col] : results)
    if (!col.error.empty()) fail("run: request {}: {}", id, col.error);

  const double prefill_s = seconds(t0, t_all_first);
  const double decode_s = seconds(t_all_first, t_end);
  const int64_t prompt_tokens = counters.n_prompt_tokens;
  const double prefill_tps = prompt_tokens / std::max(prefill_s, 1e-9);
  const double decode_tps = decode_tokens > 0 ? decode_tokens / std::max(decode_s, 1e-9) : 0.0;
  int n_seqs = 0;
  for (const Job& j : jobs) n_seqs += j.params.n;

  // --verify-paths: the model reran every step down the other paths; judged by the doctor's
  // path-check tolerances (logits, each layer's attention output) and its greedy rule, so this
  // fails where `mla doctor` would. A FAIL makes the exit status 1.
  nlohmann::json verify_json;
  std::string verify_line;
  if (a.verify_paths) {
    const PathVerifyLog& v = model_runner.verify_log();
    DoctorOptions dopt;
    dopt.kv_dtype = kvo.dtype;
    const PathTolerances tol = path_tolerances(model_runner.weights(), dopt);
    const double tol_layer = tol.layer, tol_logits = tol.logits;
    auto finite = [](double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json("inf"); };
    int64_t worst = 0;
    for (size_t l = 0; l < v.layer_rel.size(); ++l)
      if (v.layer_rel[l] > v.layer_rel[worst]) worst = static_cast<int64_t>(l);
    const double worst_rel = v.layer_rel.empty() ? 0.0 : v.layer_rel[worst];
    std::string why;
    if (!v.greedy_agree())
      why = "greedy tokens differ";
    else if (!(v.max_logits_rel() <= tol_logits))
      why = fmt::format("logits differ by {:.2e} (tolerance {:.0e})", v.max_logits_rel(), tol_logits);
    else if (!(worst_rel <= tol_layer))
      why = fmt::format("blk.{} attention differs by {:.2e} (tolerance {:.0e})", worst, worst_rel, tol_layer);
    verify_line = why.empty() ? fmt::format(
                                    "ok (over {} steps: logits <= {:.2e}, layers <= {:.2e} at blk.{}; "
                                    "tolerances {:.0e} / {:.0e})",
                                    v.steps.size(), v.max_logits_rel(), worst_rel, worst, tol_logits, tol_layer)
                              : "FAIL: " + why;
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
    verify_json = {{"ok", why.empty()},
                   {"verdict", verify_line},
                   {"max_logits_rel", finite(v.max_logits_rel())},
                   {"greedy_agree", v.greedy_agree()},
                   {"worst_layer", worst},
                   {"max_layer_rel", finite(worst_rel)},
                   {"layer_rel", layers},
                   {"tol_logits", tol_logits},
                   {"tol_layer", tol_layer},
                   {"steps", steps}};
    log().info("verify-paths: {}", verify_line);
    if (!why.empty()) exit_code() = 1;
  }

  auto add_timing = [&](nlohmann::json& j) {
    j["prefill_tokens"] = prompt_tokens;
    j["prefill_seconds"] = prefill_s;
    j["prefill_tokens_per_second"] = prefill_tps;
    j["decode_tokens"] = decode_tokens;
    j["decode_seconds"] = decode_s;
    j["decode_tokens_per_second"] = decode_tps;
    j["mla_path"] = a.mla_path;
    j["tokens_mha"] = counters.n_tokens_mha;  // as the model counted the paths it took
    j["tokens_mqa"] = counters.n_tokens_mqa;
    if (a.verify_paths) j["verify_paths"] = verify_json;
    if (n_spec > 0) {
      j["spec_tokens"] = n_spec;
      j["spec_drafts"] = counters.n_spec_drafts;
      j["spec_draft_tokens"] = counters.n_spec_draft_tokens;
      j["spec_accepted_tokens"] = counters.n_spec_accepted_tokens;
      j["spec_accepted_per_pos"] = counters.n_spec_accepted_per_pos;
      j["steps"] = counters.n_steps;
    }
  };
  // Speculation: acceptance rate (accepted / drafted) and mean accepted length (tokens per verify
  // step: the accepted drafts plus the target's own token).
  auto spec_line = [&] {
    if (n_spec == 0) return;
    const SpecAcceptance acc =
        spec_acceptance(counters.n_spec_drafts, counters.n_spec_draft_tokens, counters.n_spec_accepted_tokens);
    fmt::print(
        "speculative (mtp, k={}): {} drafts, {} of {} draft tokens accepted ({:.1f}%), mean accepted length "
        "{:.2f}, per position {}\n",
        n_spec, counters.n_spec_drafts, counters.n_spec_accepted_tokens, counters.n_spec_draft_tokens, 100.0 * acc.rate,
        acc.mean_len, fmt::join(counters.n_spec_accepted_per_pos, " "));
  };

  if (!batch) {
    const Collected& col = results.at("run");
    if (a.json) {
      nlohmann::json j;
      j["prompt"] = jobs[0].prompt;
      j["continuation"] = col.tokens[0];
      if (tok) j["text"] = col.text[0];
      j["finish_reason"] = col.finish[0];
      add_timing(j);
      fmt::print("{}\n", j.dump());
      return;
    }
    fmt::print("continuation ids: {}\n", fmt::join(col.tokens[0], " "));
    if (tok) fmt::print("continuation: {}\n", col.text[0]);
    fmt::print("prefill: {} tokens in {:.3f} s ({:.1f} tokens/s)\n", prompt_tokens, prefill_s, prefill_tps);
    fmt::print("decode:  {} tokens in {:.3f} s ({:.1f} tokens/s)\n", decode_tokens, decode_s, decode_tps);
    spec_line();
    if (a.verify_paths) fmt::print("verify-paths: {}\n", verify_line);
    return;
  }

  const double prefix_rate =
      counters.n_prefix_queries > 0 ? static_cast<double>(counters.n_prefix_hits) / counters.n_prefix_queries : 0.0;
  if (a.json) {
    nlohmann::json j;
    j["requests"] = nlohmann::json::array();
    for (const Job& job : jobs) {
      const Collected& col = results.at(job.id);
      for (int i = 0; i < job.params.n; ++i)
        j["requests"].push_back({{"id", job.id},
                                 {"index", i},
                                 {"prompt_tokens", job.prompt.size()},
                                 {"continuation", col.tokens[i]},
                                 {"finish_reason", col.finish[i]}});
      if (tok)
        for (int i = 0; i < job.params.n; ++i)
          j["requests"][j["requests"].size() - job.params.n + i]["text"] = col.text[i];
    }
    j["n_sequences"] = n_seqs;
    add_timing(j);
    j["generated_tokens"] = counters.n_generation_tokens;
    j["steps"] = counters.n_steps;
    j["preemptions"] = counters.n_preemptions;
    j["prefix_cache_hit_rate"] = prefix_rate;
    j["forward_seconds"] = counters.forward_seconds;
    j["grammar_masks"] = counters.n_masks;
    j["mask_wait_seconds"] = counters.mask_wait_seconds;
    fmt::print("{}\n", j.dump());
    return;
  }
  for (const Job& job : jobs) {
    const Collected& col = results.at(job.id);
    for (int i = 0; i < job.params.n; ++i)
      fmt::print("[{}{}] {} tokens ({}): {}\n", job.id, job.params.n > 1 ? fmt::format(".{}", i) : "",
                 col.tokens[i].size(), col.finish[i], fmt::join(col.tokens[i], " "));
  }
  fmt::print("sequences: {}, steps: {}, preemptions: {}, prefix cache hits: {:.1f}%\n", n_seqs, counters.n_steps,
             counters.n_preemptions, 100.0 * prefix_rate);
  fmt::print("prefill: {} tokens in {:.3f} s ({:.1f} tokens/s)\n", prompt_tokens, prefill_s, prefill_tps);
  fmt::print("decode:  {} tokens in {:.3f} s ({:.1f} tokens/s, {} sequences)\n", decode_tokens, decode_s, decode_tps,
             n_seqs);
  spec_line();
  if (a.verify_paths) fmt::print("verify-paths: {}\n", verify_line);
}

}  // namespace

void register_run(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Generate from a deepseek2 GGUF on the CPU through the serving engine");
  static RunArgs a;
  cmd->add_option("-m,--model", a.model, "deepseek2 GGUF file")->required();
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
  cmd->add_option("--mla-path", a.mla_path,
                  "MLA attention path per sequence: auto (decode MQA; prefill chunks down the path cheaper at the "
                  "model's widths, logged at start) | mha | mqa")
      ->check(CLI::IsMember({"auto", "mha", "mqa"}))
      ->capture_default_str();
  cmd->add_flag("--verify-paths", a.verify_paths,
                "Rerun every step end to end with each sequence down the other MLA path (same weights, kernels and "
                "inputs) and compare each layer's attention output and the logits; exits 1 where `mla doctor`'s "
                "path check would fail");
  cmd->add_option("-t,--threads", a.threads, "Threads (default: all hardware threads)");
  cmd->add_option("--max-num-batched-tokens", a.max_num_batched_tokens,
                  "Token budget per engine step (prefill chunk + decodes)")
      ->capture_default_str();
  cmd->add_option("--max-num-seqs", a.max_num_seqs, "Most sequences running at once")->capture_default_str();
  cmd->add_option("--kv-cache-dtype", a.kv_dtype, "Latent cache dtype: f16 | f32 | bf16 | q8_0")->capture_default_str();
  cmd->add_option("--kv-cache-tokens", a.kv_tokens, "KV cache capacity in tokens (default: 32768)");
  cmd->add_option("--kv-cache-memory", a.kv_memory, "KV cache capacity in bytes, e.g. 2G (instead of tokens)");
  cmd->add_option("--block-size", a.block_size, "Tokens per KV block")->capture_default_str();
  cmd->add_flag("--no-prefix-cache", a.no_prefix_cache, "Disable prefix caching");
  cmd->add_option("--dump-logits", a.dump_logits,
                  "Write the F32 logits of every processed position (prompt, then each fed-back token) to FILE");
  cmd->add_flag("--json", a.json, "Print the result as one JSON object");
  cmd->add_option("--json-schema", a.json_schema_file,
                  "Constrain every output to JSON valid under the JSON Schema in this file");
  cmd->add_option("--regex", a.regex, "Constrain every output to match this regular expression");
  cmd->add_option("--grammar", a.grammar_file, "Constrain every output to the EBNF grammar (rule 'root') in this file");
  cmd->add_option("--speculative-config", a.speculative_config,
                  R"(Speculative decoding with the model's MTP layer, as vLLM spells it: )"
                  R"('{"method": "mtp", "num_speculative_tokens": K}', K = 1..4)");
  cmd->add_option("--mtp-logits", a.mtp_logits,
                  "Write the MTP layer's draft logits of the prompt (raw float32, one row per position 1..n-1: row p "
                  "from the trunk's state at p and token p + 1) before generating");
  cmd->add_flag("--warmup", a.warmup,
                "Run one untimed request of the first prompt's length first (as llama-bench does)");
  add_common_options(cmd, a.common);
  cmd->callback([] { run(a); });
}

}  // namespace mla::cli
