// `mla doctor` on a DeepSeek-V4 (`deepseek4`) file (docs/DEEPSEEK-V4.md §5): the layout (every
// tensor the layer schedule needs, bound with its shape and type by Deepseek4Weights' loader),
// the numerics (the canaries' logits finite), the agreement of the ways the engine can run a
// prompt (chunked prefill, token-by-token decode, the runner's batched and chunked steps) with the
// whole prefill, and sparse vs dense CSA where the indexer's top-k keeps every entry. There is no
// absorbed / decompressed pair to compare: V4 attends with one shared K=V head.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <span>

#include "doctor/checks.h"
#include "engine/deepseek4_runner.h"
#include "gguf/gguf.h"
#include "model/batch.h"
#include "model/deepseek4.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/log.h"

namespace mla::doctor {
namespace {

// Every position's logits of one canary, [n_tok][n_vocab].
using Logits = std::vector<float>;

// The largest over positions of max_v |got - want| / max_v |want|; inf where either holds a
// non-finite value (a NaN must not pass a "<= tol" test).
double rel_diff(const Logits& got, const Logits& want, int64_t n_vocab) {
  double worst = 0;
  for (size_t t = 0; t * n_vocab < want.size(); ++t) {
    double diff = 0, mag = 0;
    for (int64_t v = 0; v < n_vocab; ++v) {
      const double a = got[t * n_vocab + v], b = want[t * n_vocab + v];
      if (!std::isfinite(a) || !std::isfinite(b)) return INFINITY;
      diff = std::max(diff, std::fabs(a - b));
      mag = std::max(mag, std::fabs(b));
    }
    worst = std::max(worst, mag > 0 ? diff / mag : diff);
  }
  return worst;
}

// tokens through model on a fresh cache as consecutive chunks of `chunk` tokens (0: one chunk).
Logits run_chunked(Deepseek4Model& model, const std::vector<int32_t>& tokens, int64_t chunk, int64_t n_vocab) {
  Logits out(tokens.size() * static_cast<size_t>(n_vocab));
  Deepseek4Cache cache = model.make_cache();
  const auto T = static_cast<int64_t>(tokens.size());
  const int64_t step = chunk > 0 ? chunk : T;
  for (int64_t t = 0; t < T; t += step) {
    const int64_t n = std::min(step, T - t);
    model.forward(std::vector<int32_t>(tokens.begin() + t, tokens.begin() + t + n), cache, out.data() + t * n_vocab);
  }
  return out;
}

// The canaries together through a Deepseek4Runner, as engine steps: every step gives each canary
// not yet done its next 2 + 3i tokens (canary i), all logits wanted.
std::vector<Logits> run_runner(Deepseek4Runner& runner, const std::vector<std::vector<int32_t>>& canaries,
                               int64_t n_vocab) {
  std::vector<Logits> out(canaries.size());
  std::vector<int32_t> done(canaries.size(), 0);
  for (size_t i = 0; i < canaries.size(); ++i) out[i].resize(canaries[i].size() * static_cast<size_t>(n_vocab));
  for (bool more = true; more;) {
    BatchMeta meta;
    std::vector<std::pair<size_t, int32_t>> rows;  // (canary, position) of each batch row
    for (size_t i = 0; i < canaries.size(); ++i) {
      const auto n =
          std::min<int32_t>(static_cast<int32_t>(2 + 3 * i), static_cast<int32_t>(canaries[i].size()) - done[i]);
      if (n <= 0) continue;
      append_sequence_chunk(meta, i + 1, std::span<const int32_t>(canaries[i]).subspan(done[i], n), done[i]);
      for (int32_t t = done[i]; t < done[i] + n; ++t) rows.emplace_back(i, t);
      done[i] += n;
    }
    more = !meta.seqs.empty();
    if (!more) break;
    Logits step(rows.size() * static_cast<size_t>(n_vocab));
    runner.forward(meta, step.data());
    for (size_t k = 0; k < rows.size(); ++k)
      std::copy_n(step.begin() + k * n_vocab, n_vocab, out[rows[k].first].begin() + rows[k].second * n_vocab);
  }
  return out;
}

// One comparison against the whole prefill of every canary.
PathComparison compare(std::string name, const std::vector<Logits>& got, const std::vector<Logits>& refs,
                       int64_t n_vocab, double tol) {
  PathComparison p = named(std::move(name));
  for (size_t i = 0; i < refs.size(); ++i) p.logits_rel = std::max(p.logits_rel, rel_diff(got[i], refs[i], n_vocab));
  p.status = p.logits_rel <= tol ? CheckStatus::Ok : CheckStatus::Fail;
  return p;
}

void finite_check(const std::vector<Logits>& refs, DoctorReport& r) {
  double max_abs = 0;
  for (size_t i = 0; i < refs.size(); ++i)
    for (size_t k = 0; k < refs[i].size(); ++k) {
      if (!std::isfinite(refs[i][k])) {
        const size_t pos = k / static_cast<size_t>(r.n_vocab);
        add_check(r, "finite", CheckStatus::Fail,
                  fmt::format("canary {}: logit {} at position {} (token {}) is {}", i + 1, k % r.n_vocab, pos,
                              r.canary_tokens[i][pos], refs[i][k]));
        return;
      }
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(refs[i][k])));
    }
  add_check(r, "finite", CheckStatus::Ok,
            fmt::format("every logit of the {} canaries' whole prefill is finite (max |logit| {:.3g})", refs.size(),
                        max_abs));
}

// The prompt for the sparse-vs-dense comparison: the longest canary's tokens repeated to n.
std::vector<int32_t> sparse_prompt(const std::vector<std::vector<int32_t>>& canaries, int64_t n) {
  const std::vector<int32_t>& canary = *std::max_element(
      canaries.begin(), canaries.end(), [](const auto& a, const auto& b) { return a.size() < b.size(); });
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (size_t t = 0; t < tokens.size(); ++t) tokens[t] = canary[t % canary.size()];
  return tokens;
}

// CSA through the indexer's top-k against CSA over every visible entry, on a prompt short enough
// that no query sees more than top_k entries (m * (top_k + 1) - 1 tokens, at most 256; or
// opt.ds4_sparse_tokens): both attend to the same entries, only the order of the sums differs.
void sparse_check(Deepseek4Model& model, const Deepseek4Config& c, const DoctorOptions& opt, DoctorReport& r) {
  constexpr double kTol = kDoctorSparseDenseTol;
  if (!c.has_csa()) {
    add_check(r, "sparse", CheckStatus::NotApplicable, "no CSA layer in the schedule: no indexer to compare");
    return;
  }
  const int64_t m = kDs4CsaRatio, full = m * (c.indexer_top_k + 1) - 1;
  const int64_t n = opt.ds4_sparse_tokens > 0 ? opt.ds4_sparse_tokens : std::min<int64_t>(full, 256);
  const std::vector<int32_t> tokens = sparse_prompt(r.canary_tokens, n);
  const Logits sparse = run_chunked(model, tokens, 0, c.n_vocab);
  model.set_csa_dense(true);
  const Logits dense = run_chunked(model, tokens, 0, c.n_vocab);
  model.set_csa_dense(false);
  PathComparison p = compare("sparse vs dense", {sparse}, {dense}, c.n_vocab, kTol);
  const int64_t most = n / m;  // entries the last query sees
  p.note = fmt::format("{} tokens: up to {} CSA entries per query, top_k {}{}", n, most, c.indexer_top_k,
                       most > c.indexer_top_k ? " (the indexer drops some: sparse and dense may differ)" : "");
  r.paths.push_back(p);
  add_check(r, "sparse", p.status,
            fmt::format("CSA through the indexer (top_k {}) vs every entry, {} tokens (up to {} entries per query): "
                        "max rel diff {:.1e} (tolerance {:.0e})",
                        c.indexer_top_k, n, most, p.logits_rel, kTol));
}

// The schedule and what the binding read: ok when every tensor of the file is read (the MTP
// blocks' aside, which the forward does not run); a tensor nothing reads is a warning (a name the
// loader does not know: in a file that loads, an extra one beside those it needs).
void layout_check(const Deepseek4Config& c, const Ds4BindSummary& bound, DoctorReport& r) {
  int64_t n_kind[3] = {0, 0, 0};
  for (int64_t il = 0; il < c.n_layer; ++il) ++n_kind[static_cast<int>(c.attn_kind(il))];
  const std::string schedule = fmt::format(
      "{} layers ({} sliding, {} CSA, {} HCA; {} hash-routed), window {}: the schedule's {} tensors bound with their "
      "shapes and types{}",
      c.n_layer, n_kind[static_cast<int>(Ds4Attn::Sliding)], n_kind[static_cast<int>(Ds4Attn::Csa)],
      n_kind[static_cast<int>(Ds4Attn::Hca)], c.n_hash_layers, c.n_window, bound.n_bound,
      bound.n_mtp_unread > 0 ? fmt::format(", {} of the MTP block(s) unread", bound.n_mtp_unread) : "");
  if (bound.unread.empty()) {
    add_check(r, "layout", CheckStatus::Ok, schedule);
    return;
  }
  std::string names;
  for (size_t i = 0; i < bound.unread.size() && i < 4; ++i) names += (i ? ", " : "") + bound.unread[i];
  add_check(r, "layout", CheckStatus::Warn,
            fmt::format("{}; {} other tensor(s) nothing reads: {}{}", schedule, bound.unread.size(), names,
                        bound.unread.size() > 4 ? ", ..." : ""));
}

}  // namespace

std::unique_ptr<Deepseek4Runner> load_deepseek4_for_doctor(const std::string& path, const DoctorOptions& opt,
                                                           DoctorReport& r, std::unique_ptr<Tokenizer>& tok) {
  describe_file(*GgufFile::open(path, /*prefault=*/false), r);
  r.mla_layout = "n/a (deepseek4: one shared K=V head, no latent projection)";
  Ds4BindSummary bound;
  auto bundle = load_deepseek4(path, /*repack=*/true, &bound);
  add_check(r, "load", CheckStatus::Ok, "config and every tensor's shape and type as expected");
  r.config_summary = describe_deepseek4_config(bundle->config);
  layout_check(bundle->config, bound, r);
  try {
    tok = Tokenizer::from_gguf(*bundle->file);
  } catch (const Error& e) {
    log().warn("doctor: no usable tokenizer ({}); canaries become fixed token ids", e.what());
  }
  Deepseek4RunnerOptions o;
  o.n_threads = opt.n_threads;
  o.max_num_seqs = static_cast<int>(std::max<size_t>(opt.prompts.size(), 1));
  return std::make_unique<Deepseek4Runner>(std::move(bundle), o);
}

void deepseek4_checks(Deepseek4Runner& runner, const DoctorOptions& opt, DoctorReport& r) {
  const Deepseek4Config& c = runner.config();
  r.n_vocab = c.n_vocab;
  r.reference = "whole prefill";
  Deepseek4Model model(c, runner.bundle().weights, opt.n_threads);
  std::vector<Logits> refs, chunked, decode;
  for (const auto& tokens : r.canary_tokens) {
    refs.push_back(run_chunked(model, tokens, 0, c.n_vocab));
    chunked.push_back(run_chunked(model, tokens, 3, c.n_vocab));
    decode.push_back(run_chunked(model, tokens, 1, c.n_vocab));
  }
  finite_check(refs, r);
  r.paths.push_back(compare("chunked prefill (3)", chunked, refs, c.n_vocab, opt.tol_logits));
  r.paths.push_back(compare("decode (1 token)", decode, refs, c.n_vocab, opt.tol_logits));
  r.paths.push_back(compare("runner steps, batched", run_runner(runner, r.canary_tokens, c.n_vocab), refs, c.n_vocab,
                            opt.tol_logits));
  r.paths.back().note = "the canaries in one batch, chunks of 2, 5, ... tokens";
  std::string failed;
  for (const auto& p : r.paths)
    if (p.status == CheckStatus::Fail)
      failed += fmt::format("{}{} {:.1e}", failed.empty() ? "" : ", ", p.name, p.logits_rel);
  add_check(r, "paths", failed.empty() ? CheckStatus::Ok : CheckStatus::Fail,
            failed.empty() ? fmt::format("chunked prefill, decode and the runner's batched steps give the whole "
                                         "prefill's logits (tolerance {:.0e})",
                                         opt.tol_logits)
                           : fmt::format("differ from the whole prefill beyond {:.0e}: {}", opt.tol_logits, failed));
  sparse_check(model, c, opt, r);
  add_check(r, "absorbed", CheckStatus::NotApplicable,
            "deepseek4 attends with one shared K=V head (no latent, no W_UK / W_UV): no absorbed vs decompressed pair");
}

}  // namespace mla::doctor
