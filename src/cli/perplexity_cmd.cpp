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
// With --kl-divergence-base FILE it also saves every scored position's log-probabilities in
// llama.cpp's base-file format (cli/kl_divergence.h); with --kl-divergence as well it reads such a
// file instead of a text (its tokens, n_ctx and chunks), runs the same positions and reports how
// far this model's distributions are from the base's, as llama-perplexity --kl-divergence does.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/engine_args.h"
#include "cli/kl_divergence.h"
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
  int n_ctx = 0;         // 0: the model's context length (with --kl-divergence: the base file's)
  int n_chunks = -1;     // -1: all
  int batch = 0;         // 0: n_ctx
  EngineArgs engine;     // -t, --mla-path, --attention-precision, --no-prefault
  CommonOptions common;  // --dsa, --log-level, --trace, --help-env
  std::string kld_base;  // --kl-divergence-base: written, or read with --kl-divergence
  bool kld = false;      // --kl-divergence
  bool json = false;
};

// -log softmax(logits)[tok], accumulated in double as llama.cpp does.
double token_nll(const float* logits, int64_t n_vocab, int32_t tok) {
  float mx = logits[0];
  for (int64_t i = 1; i < n_vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < n_vocab; ++i) sum += std::exp(logits[i] - mx);
  return -(static_cast<double>(logits[tok] - mx) - std::log(sum));
}

// The tokens and how they are cut: n_chunk chunks of n_ctx tokens, each run in forward calls of
// at most `batch` tokens, scored from position `first` on.
struct Chunks {
  std::vector<TokenId> tokens;
  double tokenize_s = 0;
  int n_ctx = 0, batch = 0, n_chunk = 0, first = 0;
  bool add_bos = false;
  TokenId bos = 0;
};

std::vector<TokenId> tokenize_file(const std::string& path, const Tokenizer& tokenizer, double& seconds) {
  const std::string text = read_text_file(path, "-f");
  const auto t0 = std::chrono::steady_clock::now();
  EncodeOptions eo;
  eo.add_special = true;
  eo.parse_special = false;  // as llama.cpp's tool: special-token text in the file is plain text
  std::vector<TokenId> tokens = tokenizer.encode(text, eo);
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return tokens;
}

// n_ctx, batch, BOS, the scored span and the chunk count (of at most n_chunk_max).
void set_shape(Chunks& ch, int n_ctx, int n_chunk_max, const PerplexityArgs& a, const DeepseekConfig& c,
               const Tokenizer& tokenizer) {
  ch.n_ctx = n_ctx;
  if (c.n_ctx_train > 0 && ch.n_ctx > c.n_ctx_train)
    log().warn("perplexity: n_ctx {} exceeds the model's training context {}", ch.n_ctx, c.n_ctx_train);
  ch.batch = a.batch > 0 ? std::min(a.batch, ch.n_ctx) : ch.n_ctx;
  ch.add_bos = tokenizer.add_bos();
  ch.bos = tokenizer.vocab().bos;
  if (ch.add_bos && !tokenizer.is_valid(ch.bos))
    fail("perplexity: the vocabulary says add_bos but has no valid BOS id");
  ch.n_chunk = a.n_chunks < 0 ? n_chunk_max : std::min(a.n_chunks, n_chunk_max);
  if (ch.n_chunk < 1) fail("perplexity: --chunks {} leaves nothing to evaluate", a.n_chunks);
  ch.first = ch.n_ctx / 2;
}

Chunks cut_into_chunks(const PerplexityArgs& a, const DeepseekConfig& c, const Tokenizer& tokenizer) {
  Chunks ch;
  const int n_ctx = a.n_ctx > 0 ? a.n_ctx : static_cast<int>(c.n_ctx_train);
  if (n_ctx < 4) fail("perplexity: -c must be >= 4, got {} (and the model gives no context length)", n_ctx);
  ch.tokens = tokenize_file(a.file, tokenizer, ch.tokenize_s);
  if (static_cast<int64_t>(ch.tokens.size()) < 2 * static_cast<int64_t>(n_ctx))
    fail("perplexity: '{}' tokenizes to {} tokens; a context of {} needs at least {}", a.file, ch.tokens.size(), n_ctx,
         2 * n_ctx);
  set_shape(ch, n_ctx, static_cast<int>(ch.tokens.size() / n_ctx), a, c, tokenizer);
  return ch;
}

// --kl-divergence: the base file's tokens, n_ctx and chunks. A text given with -f must tokenize to
// the same tokens (llama.cpp ignores it; here it is a check that the base is the text meant).
Chunks chunks_from_base(const PerplexityArgs& a, const DeepseekConfig& c, const Tokenizer& tokenizer,
                        const KldBaseReader& base) {
  const KldBaseHeader& h = base.header();
  if (h.n_vocab != c.n_vocab)
    fail("perplexity: the base '{}' has a vocabulary of {} tokens, '{}' has {}", a.kld_base, h.n_vocab, a.model,
         c.n_vocab);
  if (a.n_ctx > 0 && a.n_ctx != h.n_ctx)
    fail("perplexity: -c {} differs from the base '{}' (n_ctx {}); omit -c to use the base's", a.n_ctx, a.kld_base,
         h.n_ctx);
  Chunks ch;
  ch.tokens = base.tokens();
  if (!a.file.empty()) {
    const std::vector<TokenId> text = tokenize_file(a.file, tokenizer, ch.tokenize_s);
    const size_t n = std::min(text.size(), ch.tokens.size());
    const size_t at = std::mismatch(text.begin(), text.begin() + n, ch.tokens.begin()).first - text.begin();
    if (at < n)
      fail("perplexity: '{}' does not tokenize as the base '{}' was: token {} is {} here, {} in the base", a.file,
           a.kld_base, at, text[at], ch.tokens[at]);
    if (text.size() < ch.tokens.size())
      fail("perplexity: '{}' tokenizes to {} tokens, fewer than the {} of the base '{}'", a.file, text.size(),
           ch.tokens.size(), a.kld_base);
  }
  set_shape(ch, h.n_ctx, h.n_chunk, a, c, tokenizer);
  return ch;
}

// What a pass over the chunks does besides running the model: begin(chunk) before it, row(chunk,
// row, logits, next) for each scored position in order (row = position - first), end(chunk) after.
struct ChunkHooks {
  std::function<void(int)> begin;
  std::function<void(int, int, const float*, TokenId)> row;
  std::function<void(int)> end;
};

// Each chunk from an empty cache, its logits kept only where they are scored (positions first ..
// n_ctx - 2).
void run_chunks(const Chunks& ch, Deepseek2Model& model, LatentCache& cache, MlaPathPolicy policy,
                const ChunkHooks& hooks) {
  const int64_t n_vocab = model.config().n_vocab;
  std::vector<float> logits(static_cast<size_t>(ch.batch) * n_vocab);
  std::vector<int32_t> piece;
  for (int i = 0; i < ch.n_chunk; ++i) {
    if (hooks.begin) hooks.begin(i);
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
        const int pos = pos0 + b.logits_rows[r];
        hooks.row(i, pos - ch.first, logits.data() + r * n_vocab, ch.tokens[start + pos + 1]);
      }
    }
    if (hooks.end) hooks.end(i);
  }
}

// The scored tokens' negative log-likelihoods, summed.
struct NllSums {
  double nll = 0, nll2 = 0;
  int64_t count = 0;
  std::vector<double> running;  // PPL after each chunk
};

// The file, its config and tokenizer, and the engine setup the flags resolve to.
struct Loaded {
  EngineSetup setup;
  std::unique_ptr<Deepseek2Bundle> bundle;
  std::unique_ptr<Tokenizer> tokenizer;
};

Loaded load(const PerplexityArgs& a) {
  Loaded l{build_engine_setup(a.engine, a.common, "perplexity"), nullptr, nullptr};
  WeightLoadOptions wo = weight_options_for(l.setup.policy, false);
  wo.prefault = l.setup.model.prefault;
  l.bundle = load_deepseek2(a.model, wo);
  l.tokenizer = Tokenizer::from_gguf(*l.bundle->file);
  return l;
}

ModelOptions model_options(const Loaded& l, const Chunks& ch) {
  ModelOptions mo = l.setup.model;
  mo.max_batch_tokens = ch.batch;  // the chunk's batch, not an engine step's budget
  return mo;
}

void print_start(const PerplexityArgs& a, const Chunks& ch, const ModelOptions& mo) {
  if (a.json) return;
  fmt::print(stderr,
             "perplexity: {} tokens (tokenized in {:.2f} s); {} chunks, n_ctx={}, batch={}, mla-path {}, {} threads\n",
             ch.tokens.size(), ch.tokenize_s, ch.n_chunk, ch.n_ctx, ch.batch, a.engine.mla_path, mo.n_threads);
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
    if (!a.kld_base.empty()) j["kl_divergence_base"] = a.kld_base;
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print("\nFinal estimate: PPL = {:.4f} +/- {:.5f}\n", ppl, err);
  fmt::print(
      stderr,
      "perplexity: {} tokens scored in {:.2f} s ({:.1f} tokens/s evaluated); mla path {}: mha {} / mqa {} tokens\n",
      s.count, seconds, static_cast<double>(ch.n_chunk) * ch.n_ctx / std::max(seconds, 1e-9), a.engine.mla_path,
      paths.tokens_mha.load(), paths.tokens_mqa.load());
  if (!a.kld_base.empty()) fmt::print(stderr, "perplexity: KL-divergence base saved to '{}'\n", a.kld_base);
}

void run_perplexity(const PerplexityArgs& a) {
  const Loaded l = load(a);
  const DeepseekConfig& c = l.bundle->config;
  const Chunks ch = cut_into_chunks(a, c, *l.tokenizer);
  std::optional<KldBaseWriter> base;
  if (!a.kld_base.empty())
    base.emplace(a.kld_base, KldBaseHeader{ch.n_ctx, static_cast<int32_t>(c.n_vocab), ch.n_chunk},
                 std::span<const TokenId>(ch.tokens.data(), static_cast<size_t>(ch.n_chunk) * ch.n_ctx));
  const ModelOptions mo = model_options(l, ch);
  Deepseek2Model model(c, l.bundle->weights, mo);
  LatentCache cache = model.make_cache(ch.n_ctx);
  print_start(a, ch, mo);

  NllSums s;
  ChunkHooks hooks;
  hooks.row = [&](int, int, const float* logits, TokenId next) {
    const double v = token_nll(logits, c.n_vocab, next);
    s.nll += v;
    s.nll2 += v * v;
    ++s.count;
    if (base) base->write_row(logits);
  };
  hooks.end = [&](int i) {
    s.running.push_back(std::exp(s.nll / s.count));
    if (a.json) return;
    fmt::print("[{}]{:.4f},", i + 1, s.running.back());
    std::fflush(stdout);
  };
  const auto t0 = std::chrono::steady_clock::now();
  run_chunks(ch, model, cache, l.setup.policy, hooks);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (base) base->finish();
  print_perplexity(a, ch, s, seconds, model.path_counters());
}

void run_kl_divergence(const PerplexityArgs& a) {
  KldBaseReader base(a.kld_base);  // before the model loads: a bad file fails at once
  const Loaded l = load(a);
  const DeepseekConfig& c = l.bundle->config;
  const Chunks ch = chunks_from_base(a, c, *l.tokenizer, base);
  const ModelOptions mo = model_options(l, ch);
  Deepseek2Model model(c, l.bundle->weights, mo);
  LatentCache cache = model.make_cache(ch.n_ctx);
  print_start(a, ch, mo);

  KldAccumulator acc;
  ChunkHooks hooks;
  hooks.begin = [&](int i) { base.read_chunk(i); };
  hooks.row = [&](int, int row, const float* logits, TokenId next) { acc.add(logits, c.n_vocab, base.row(row), next); };
  hooks.end = [&](int i) {
    if (a.json) return;
    if (i == 0) print_kld_chunk_header();
    print_kld_chunk_line(i, summarize_kld(acc, false));
  };
  const auto t0 = std::chrono::steady_clock::now();
  run_chunks(ch, model, cache, l.setup.policy, hooks);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const KldSummary summary = summarize_kld(acc, true);
  if (a.json) {
    nlohmann::json j = kld_summary_json(summary);
    j["model"] = a.model;
    j["kl_divergence_base"] = a.kld_base;
    j["n_ctx"] = ch.n_ctx;
    j["chunks"] = ch.n_chunk;
    j["mla_path"] = a.engine.mla_path;
    j["seconds"] = seconds;
    fmt::print("{}\n", j.dump());
    return;
  }
  print_kld_summary(summary);
  fmt::print(stderr, "perplexity: {} tokens compared with '{}' in {:.2f} s\n", summary.count, a.kld_base, seconds);
}

}  // namespace

void register_perplexity(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "perplexity",
      "Perplexity of an MLA-MoE GGUF on a text file, or its KL divergence from a base run (llama.cpp's method)");
  static PerplexityArgs a;
  cmd->add_option("-m,--model", a.model, "deepseek2 GGUF file")->required();
  cmd->add_option("-f,--file", a.file, "Text file (with --kl-divergence: optional, checked against the base's tokens)");
  cmd->add_option("-c,--ctx-size", a.n_ctx,
                  "Tokens per chunk (default: the model's context length; with --kl-divergence the base's)");
  cmd->add_option("--chunks", a.n_chunks, "Most chunks to evaluate (default: all)");
  cmd->add_option("-b,--batch", a.batch, "Most tokens per forward call (default: the chunk)");
  cmd->add_option("--kl-divergence-base", a.kld_base,
                  "Save the scored positions' log-probabilities to FILE (llama-perplexity's format); with "
                  "--kl-divergence, the base to compare with")
      ->type_name("FILE");
  cmd->add_flag("--kl-divergence", a.kld,
                "Compare this model with the base of --kl-divergence-base (KL divergence, top-token agreement, "
                "PPL ratio) on the base's tokens");
  add_engine_args(cmd, a.engine,
                  {.max_num_batched_tokens = false,
                   .kv_cache_dtype = false,
                   .speculative_config = false,
                   .weights_memory = false,
                   .capacity = false});
  add_common_options(cmd, a.common);
  cmd->add_flag("--json", a.json, "Print the result as one JSON object");
  cmd->callback([] {
    apply_common_options(a.common);
    if (a.kld) {
      if (a.kld_base.empty())
        fail("perplexity: --kl-divergence needs --kl-divergence-base FILE (the base run's log-probabilities)");
      run_kl_divergence(a);
    } else {
      if (a.file.empty()) fail("perplexity: -f FILE is required (or --kl-divergence with --kl-divergence-base FILE)");
      run_perplexity(a);
    }
  });
}

}  // namespace mla::cli
