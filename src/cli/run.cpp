// mla run -m FILE (-p TEXT | --tokens 1,2,3) -n N: greedy (or sampled) generation from a
// deepseek2 GGUF on the CPU, printing the continuation and prefill/decode tokens per second.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "cli/commands.h"
#include "gguf/gguf.h"
#include "model/deepseek2.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/log.h"
#include "util/trace.h"

namespace mla::cli {
namespace {

struct RunArgs {
  std::string model;
  std::string prompt;
  std::string tokens;
  int n_predict = 16;
  double temp = 0;
  uint64_t seed = 0;
  std::string mla_path = "auto";
  bool verify_paths = false;
  int threads = 0;
  int batch = 256;
  std::string trace;
  std::string dump_logits;
  bool json = false;
};

std::vector<int32_t> parse_token_list(const std::string& s) {
  std::vector<int32_t> out;
  size_t at = 0;
  while (at < s.size()) {
    size_t comma = s.find(',', at);
    std::string item = s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0 || v > INT32_MAX)
      fail("run: --tokens: '{}' is not a non-negative token id", item);
    out.push_back(static_cast<int32_t>(v));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  if (out.empty()) fail("run: --tokens is empty");
  return out;
}

int32_t pick_token(const float* logits, int64_t n_vocab, double temp, std::mt19937_64& rng) {
  if (temp <= 0) {
    int64_t best = 0;
    for (int64_t i = 1; i < n_vocab; ++i)
      if (logits[i] > logits[best]) best = i;
    return static_cast<int32_t>(best);
  }
  double mx = logits[0];
  for (int64_t i = 1; i < n_vocab; ++i) mx = std::max(mx, static_cast<double>(logits[i]));
  std::vector<double> p(static_cast<size_t>(n_vocab));
  double sum = 0;
  for (int64_t i = 0; i < n_vocab; ++i) sum += (p[i] = std::exp((logits[i] - mx) / temp));
  double r = std::uniform_real_distribution<double>(0, sum)(rng);
  for (int64_t i = 0; i < n_vocab; ++i)
    if ((r -= p[i]) <= 0) return static_cast<int32_t>(i);
  return static_cast<int32_t>(n_vocab - 1);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void run(const RunArgs& a) {
  if (a.trace.empty()) trace_configure_from_env();
  else trace_configure(a.trace);
  if (a.n_predict < 1) fail("run: -n must be >= 1, got {}", a.n_predict);
  if (a.batch < 1) fail("run: --batch must be >= 1, got {}", a.batch);
  if (!a.prompt.empty() && !a.tokens.empty()) fail("run: give either -p or --tokens, not both");
  if (a.prompt.empty() && a.tokens.empty()) fail("run: give a prompt with -p TEXT or --tokens 1,2,3");
  const MlaPathPolicy policy = parse_mla_path_policy(a.mla_path);
  auto t_load = std::chrono::steady_clock::now();
  auto bundle = load_deepseek2(a.model, weight_options_for(policy, a.verify_paths));
  const DeepseekConfig& c = bundle->config;
  // -p: the file's own tokenizer, BOS added where the vocabulary says so.
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<int32_t> prompt;
  if (!a.prompt.empty()) {
    tokenizer = Tokenizer::from_gguf(*bundle->file);
    EncodeOptions eo;
    eo.add_special = true;
    prompt = tokenizer->encode(a.prompt, eo);
    if (prompt.empty()) fail("run: the prompt tokenizes to nothing");
  } else {
    prompt = parse_token_list(a.tokens);
  }
  ModelOptions mo;
  mo.n_threads = a.threads > 0 ? a.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  mo.max_batch_tokens = a.batch;
  mo.verify_paths = a.verify_paths;
  Deepseek2Model model(c, bundle->weights, mo);
  log().info("loaded {} in {:.2f} s: {} layers, {} heads, kv_lora_rank {}, {} experts (top {}), vocab {}, {} threads",
             a.model, seconds_since(t_load), c.n_layer, c.n_head, c.kv_lora_rank, c.n_expert, c.n_expert_used, c.n_vocab,
             mo.n_threads);

  const int64_t n_ctx = static_cast<int64_t>(prompt.size()) + a.n_predict;
  LatentCache cache = model.make_cache(n_ctx);
  const bool dump = !a.dump_logits.empty();
  std::FILE* dump_file = nullptr;
  if (dump) {
    dump_file = std::fopen(a.dump_logits.c_str(), "wb");
    if (!dump_file) fail("run: cannot write '{}'", a.dump_logits);
  }
  std::vector<float> logits(static_cast<size_t>(a.batch * c.n_vocab));
  auto write_logits = [&](int64_t rows) {
    if (dump && std::fwrite(logits.data(), sizeof(float), rows * c.n_vocab, dump_file) != static_cast<size_t>(rows * c.n_vocab))
      fail("run: short write to '{}'", a.dump_logits);
  };
  std::mt19937_64 rng(a.seed);

  // Prefill in chunks of --batch tokens.
  auto t0 = std::chrono::steady_clock::now();
  int32_t n_past = 0;
  const float* last = nullptr;
  for (size_t at = 0; at < prompt.size(); at += a.batch) {
    std::vector<int32_t> chunk(prompt.begin() + at, prompt.begin() + std::min(prompt.size(), at + a.batch));
    const bool final_chunk = at + chunk.size() == prompt.size();
    BatchMeta b = single_sequence_batch(chunk, n_past, dump, policy);
    if (!dump && !final_chunk) b.logits_rows.clear();
    model.forward(b, cache, logits.data());
    write_logits(static_cast<int64_t>(b.logits_rows.size()));
    n_past += static_cast<int32_t>(chunk.size());
    last = logits.data() + (b.logits_rows.size() - 1) * c.n_vocab;
  }
  const double t_prefill = seconds_since(t0);

  std::vector<int32_t> out;
  out.push_back(pick_token(last, c.n_vocab, a.temp, rng));
  auto t1 = std::chrono::steady_clock::now();
  for (int i = 1; i < a.n_predict; ++i) {
    BatchMeta b = single_sequence_batch({out.back()}, n_past, true, policy);
    model.forward(b, cache, logits.data());
    write_logits(1);
    ++n_past;
    out.push_back(pick_token(logits.data(), c.n_vocab, a.temp, rng));
  }
  const double t_decode = seconds_since(t1);
  if (dump_file) std::fclose(dump_file);

  const int n_decode = a.n_predict - 1;
  const double prefill_tps = prompt.size() / std::max(t_prefill, 1e-9);
  const double decode_tps = n_decode > 0 ? n_decode / std::max(t_decode, 1e-9) : 0.0;
  if (a.json) {
    nlohmann::json j;
    j["prompt"] = prompt;
    j["continuation"] = out;
    j["prefill_tokens"] = prompt.size();
    j["prefill_seconds"] = t_prefill;
    j["prefill_tokens_per_second"] = prefill_tps;
    j["decode_tokens"] = n_decode;
    j["decode_seconds"] = t_decode;
    j["decode_tokens_per_second"] = decode_tps;
    j["mla_path"] = a.mla_path;
    if (tokenizer) j["text"] = tokenizer->decode_text(out);
    fmt::print("{}\n", j.dump());
    return;
  }
  if (tokenizer) fmt::print("{}{}\n", a.prompt, tokenizer->decode_text(out));
  std::string ids;
  for (int32_t t : out) ids += fmt::format("{}{}", ids.empty() ? "" : " ", t);
  fmt::print("continuation ids: {}\n", ids);
  fmt::print("prefill: {} tokens in {:.3f} s ({:.1f} tokens/s)\n", prompt.size(), t_prefill, prefill_tps);
  fmt::print("decode:  {} tokens in {:.3f} s ({:.1f} tokens/s)\n", n_decode, t_decode, decode_tps);
}

}  // namespace

void register_run(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Generate from a deepseek2 GGUF on the CPU");
  static RunArgs a;
  cmd->add_option("-m,--model", a.model, "deepseek2 GGUF file")->required();
  cmd->add_option("-p,--prompt", a.prompt, "Prompt text (tokenized with the file's vocabulary, BOS added as it says)");
  cmd->add_option("--tokens", a.tokens, "Prompt as comma-separated token ids");
  cmd->add_option("-n,--n-predict", a.n_predict, "Tokens to generate")->capture_default_str();
  cmd->add_option("--temp", a.temp, "Sampling temperature; 0 is greedy")->capture_default_str();
  cmd->add_option("--seed", a.seed, "Sampling seed")->capture_default_str();
  cmd->add_option("--mla-path", a.mla_path, "MLA attention path per sequence: auto (decode MQA, prefill MHA) | mha | mqa")
      ->check(CLI::IsMember({"auto", "mha", "mqa"}))
      ->capture_default_str();
  cmd->add_flag("--verify-paths", a.verify_paths, "Run both MLA paths and log their largest difference per layer");
  cmd->add_option("-t,--threads", a.threads, "Threads (default: all hardware threads)");
  cmd->add_option("--batch", a.batch, "Most tokens per forward call (prefill chunk)")->capture_default_str();
  cmd->add_option("--trace", a.trace, "Trace switches, e.g. dispatch:8 (default: $MLA_TRACE)");
  cmd->add_option("--dump-logits", a.dump_logits,
                  "Write the F32 logits of every processed position (prompt, then each fed-back token) to FILE");
  cmd->add_flag("--json", a.json, "Print the result as one JSON object");
  cmd->callback([] { run(a); });
}

}  // namespace mla::cli
