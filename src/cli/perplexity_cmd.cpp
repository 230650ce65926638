// mla perplexity -m FILE -f TEXT [-c CTX] [--chunks N]: perplexity of a deepseek2 GGUF on a text
// file, by the method of llama.cpp's perplexity tool, so the two tools' numbers compare directly:
//   - the whole file is tokenized once, with BOS when the vocabulary says add_bos (special-token
//     text in the file is not parsed as such);
//   - it is cut into n_chunk = min(--chunks, n_tokens / n_ctx) chunks of n_ctx tokens; each chunk
//     starts from an empty cache, and its first token is replaced by BOS when add_bos;
//   - only the second half is scored: the logits at positions first = n_ctx/2 .. n_ctx-2 predict
//     the tokens at first+1 .. n_ctx-1 (n_ctx - 1 - first tokens per chunk), so every scored token
//     has at least n_ctx/2 tokens of context;
//   - running PPL = exp(mean NLL) after every chunk; final estimate with the standard error
//     ppl * sqrt((mean(NLL²) - mean(NLL)²) / (count - 1)).
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/engine_args.h"
#include "gguf/gguf.h"
#include "model/deepseek2.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/log.h"

namespace mla::cli {
namespace {

struct PerplexityArgs {
  std::string model;
  std::string file;
  int n_ctx = 0;         // 0: the model's context length
  int n_chunks = -1;     // -1: all
  int batch = 0;         // 0: n_ctx
  EngineArgs engine;     // -t, --mla-path, --attention-precision, --no-prefault
  CommonOptions common;  // --dsa, --log-level, --trace, --help-env
  bool json = false;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("perplexity: cannot open '{}'", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// -log softmax(logits)[tok], accumulated in double as llama.cpp does.
double token_nll(const float* logits, int64_t n_vocab, int32_t tok) {
  float mx = logits[0];
  for (int64_t i = 1; i < n_vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < n_vocab; ++i) sum += std::exp(logits[i] - mx);
  return -(static_cast<double>(logits[tok] - mx) - std::log(sum));
}

// The file's tokens and how they are cut: n_chunk chunks of n_ctx tokens, each run in forward
// calls of at most `batch` tokens, scored from position `first` on.
struct Chunks {
  std::vector<TokenId> tokens;
  double tokenize_s = 0;
  int n_ctx = 0, batch = 0, n_chunk = 0, first = 0;
  bool add_bos = false;
  TokenId bos = 0;
};

Chunks cut_into_chunks(const PerplexityArgs& a, const DeepseekConfig& c, const Tokenizer& tokenizer) {
  Chunks ch;
  const int64_t n_ctx_train = c.n_ctx_train;
  ch.n_ctx = a.n_ctx > 0 ? a.n_ctx : static_cast<int>(n_ctx_train);
  if (ch.n_ctx < 4) fail("perplexity: -c must be >= 4, got {} (and the model gives no context length)", ch.n_ctx);
  if (n_ctx_train > 0 && ch.n_ctx > n_ctx_train)
    log().warn("perplexity: n_ctx {} exceeds the model's training context {}", ch.n_ctx, n_ctx_train);
  ch.batch = a.batch > 0 ? std::min(a.batch, ch.n_ctx) : ch.n_ctx;

  const std::string text = read_file(a.file);
  auto t_tok = std::chrono::steady_clock::now();
  EncodeOptions eo;
  eo.add_special = true;
  eo.parse_special = false;  // as llama.cpp's tool: special-token text in the file is plain text
  ch.tokens = tokenizer.encode(text, eo);
  ch.tokenize_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_tok).count();
  if (static_cast<int64_t>(ch.tokens.size()) < 2 * static_cast<int64_t>(ch.n_ctx))
    fail("perplexity: '{}' tokenizes to {} tokens; a context of {} needs at least {}", a.file, ch.tokens.size(),
         ch.n_ctx, 2 * ch.n_ctx);
  ch.add_bos = tokenizer.add_bos();
  ch.bos = tokenizer.vocab().bos;
  if (ch.add_bos && !tokenizer.is_valid(ch.bos))
    fail("perplexity: the vocabulary says add_bos but has no valid BOS id");

  const int n_chunk_max = static_cast<int>(ch.tokens.size() / ch.n_ctx);
  ch.n_chunk = a.n_chunks < 0 ? n_chunk_max : std::min(a.n_chunks, n_chunk_max);
  ch.first = ch.n_ctx / 2;
  return ch;
}

// The scored tokens' negative log-likelihoods, summed.
struct NllSums {
  double nll = 0, nll2 = 0;
  int64_t count = 0;
  std::vector<double> running;  // PPL after each chunk
};

// Each chunk from an empty cache, its logits kept only where they are scored (positions first ..
// n_ctx - 2); print_running: the running PPL after each chunk on stdout.
NllSums score_chunks(const Chunks& ch, Deepseek2Model& model, LatentCache& cache, MlaPathPolicy policy,
                     bool print_running) {
  const int64_t n_vocab = model.config().n_vocab;
  std::vector<float> logits(static_cast<size_t>(ch.batch) * n_vocab);
  NllSums s;
  std::vector<int32_t> piece;
  for (int i = 0; i < ch.n_chunk; ++i) {
    const int64_t start = static_cast<int64_t>(i) * ch.n_ctx;
    for (int pos0 = 0; pos0 < ch.n_ctx; pos0 += ch.batch) {
      const int len = std::min(ch.batch, ch.n_ctx - pos0);
      piece.assign(ch.tokens.begin() + start + pos0, ch.tokens.begin() + start + pos0 + len);
      if (ch.add_bos && pos0 == 0) piece[0] = ch.bos;
      BatchMeta b = single_sequence_batch(piece, pos0, true, policy);
      b.logits_rows.clear();
      for (int k = 0; k < len; ++k)
        if (pos0 + k >= ch.first && pos0 + k <= ch.n_ctx - 2) b.logits_rows.push_back(k);
      model.forward(b, cache, logits.data());
      for (size_t r = 0; r < b.logits_rows.size(); ++r) {
        const int64_t pos = pos0 + b.logits_rows[r];
        const double v = token_nll(logits.data() + r * n_vocab, n_vocab, ch.tokens[start + pos + 1]);
        s.nll += v;
        s.nll2 += v * v;
        ++s.count;
      }
    }
    s.running.push_back(std::exp(s.nll / s.count));
    if (print_running) {
      fmt::print("[{}]{:.4f},", i + 1, s.running.back());
      std::fflush(stdout);
    }
  }
  return s;
}

void print_perplexity(const PerplexityArgs& a, const Chunks& ch, const NllSums& s, double seconds,
                      const PathCounters& paths) {
  const double mean = s.nll / s.count;
  const double ppl = std::exp(mean);
  const double var = s.nll2 / s.count - mean * mean;
  const double err = var > 0 && s.count > 1 ? std::sqrt(var / (s.count - 1)) * ppl : 0.0;
  if (a.json) {
    nlohmann::json j;
    j["model"] = a.model;
    j["file"] = a.file;
    j["n_tokens"] = ch.tokens.size();
    j["n_ctx"] = ch.n_ctx;
    j["chunks"] = ch.n_chunk;
    j["scored_tokens"] = s.count;
    j["mla_path"] = a.engine.mla_path;
    // The tokens the model sent down each path (its own count: what `auto` decided).
    j["tokens_mha"] = paths.tokens_mha.load();
    j["tokens_mqa"] = paths.tokens_mqa.load();
    j["mean_nll"] = mean;
    j["ppl"] = ppl;
    j["ppl_error"] = err;
    j["running_ppl"] = s.running;
    j["seconds"] = seconds;
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print("\nFinal estimate: PPL = {:.4f} +/- {:.5f}\n", ppl, err);
  fmt::print(
      stderr,
      "perplexity: {} tokens scored in {:.2f} s ({:.1f} tokens/s evaluated); mla path {}: mha {} / mqa {} tokens\n",
      s.count, seconds, static_cast<double>(ch.n_chunk) * ch.n_ctx / std::max(seconds, 1e-9), a.engine.mla_path,
      paths.tokens_mha.load(), paths.tokens_mqa.load());
}

void run_perplexity(const PerplexityArgs& a) {
  apply_common_options(a.common);
  const EngineSetup setup = build_engine_setup(a.engine, a.common, "perplexity");
  const MlaPathPolicy policy = setup.policy;
  WeightLoadOptions wo = weight_options_for(policy, false);
  wo.prefault = setup.model.prefault;
  auto bundle = load_deepseek2(a.model, wo);
  const DeepseekConfig& c = bundle->config;
  auto tokenizer = Tokenizer::from_gguf(*bundle->file);
  const Chunks ch = cut_into_chunks(a, c, *tokenizer);

  ModelOptions mo = setup.model;
  mo.max_batch_tokens = ch.batch;  // the chunk's batch, not an engine step's budget
  Deepseek2Model model(c, bundle->weights, mo);
  LatentCache cache = model.make_cache(ch.n_ctx);
  if (!a.json)
    fmt::print(
        stderr,
        "perplexity: {} tokens (tokenized in {:.2f} s); {} chunks, n_ctx={}, batch={}, mla-path {}, {} threads\n",
        ch.tokens.size(), ch.tokenize_s, ch.n_chunk, ch.n_ctx, ch.batch, a.engine.mla_path, mo.n_threads);
  const auto t0 = std::chrono::steady_clock::now();
  const NllSums s = score_chunks(ch, model, cache, policy, !a.json);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  print_perplexity(a, ch, s, seconds, model.path_counters());
}

}  // namespace

void register_perplexity(CLI::App& app) {
  auto* cmd = app.add_subcommand("perplexity", "Perplexity of an MLA-MoE GGUF on a text file (llama.cpp's method)");
  static PerplexityArgs a;
  cmd->add_option("-m,--model", a.model, "deepseek2 GGUF file")->required();
  cmd->add_option("-f,--file", a.file, "Text file")->required();
  cmd->add_option("-c,--ctx-size", a.n_ctx, "Tokens per chunk (default: the model's context length)");
  cmd->add_option("--chunks", a.n_chunks, "Most chunks to evaluate (default: all)");
  cmd->add_option("-b,--batch", a.batch, "Most tokens per forward call (default: the chunk)");
  add_engine_args(
      cmd, a.engine,
      {.max_num_batched_tokens = false, .kv_cache_dtype = false, .speculative_config = false, .capacity = false});
  add_common_options(cmd, a.common);
  cmd->add_flag("--json", a.json, "Print the result as one JSON object");
  cmd->callback([] { run_perplexity(a); });
}

}  // namespace mla::cli
