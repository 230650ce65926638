// The doctor's path check: the canaries through MHA, MQA, 1-token and chunked prefill, the other
// layout and dense vs sparse, each against the reference run, and the tolerances they are held to.
#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "doctor/checks.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

namespace mla::doctor {

namespace {

// A trained file's W_UK heads pair with their own queries; another order carrying clearly more
// score energy means the heads are stored permuted (the same on every path: no path check sees it).
void head_check(const HeadPairing& hp, DoctorReport& r) {
  if (hp.best.empty()) {
    add_check(r, "heads", CheckStatus::NotApplicable, "one head");
    return;
  }
  const std::string d =
      fmt::format("query·key score energy with attn_k_b heads {} is {:.2f}x the stored order's (blk.{})", hp.best,
                  hp.ratio, hp.layer);
  r.head_pairing = d;
  if (hp.ratio > 2)
    add_check(r, "heads", CheckStatus::Fail, "attn_k_b heads look permuted: " + d);
  else
    add_check(r, "heads", CheckStatus::Ok, "no other head order pairs clearly better (" + d + "; fail above 2x)");
}

// The relative rounding step of a value stored as type t (a latent cache row, or a matmul's
// activations quantized to the weight's vec_dot_type).
double rounding_of(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
      return 0x1p-24;
    case GgmlType::F16:
      return 0x1p-11;
    case GgmlType::BF16:
      return 0x1p-8;
    default:
      return 1.0 / 254;  // 8-bit blocks (Q8_0, Q8_K): half a step of 127 levels
  }
}

size_t first_bad_layer(const PathComparison& p, double tol) {
  for (size_t l = 0; l < p.layer_rel.size(); ++l)
    if (p.layer_rel[l] > tol) return l;
  return 0;
}

// Which run is the reference and which runs are compared with it. The reference is MHA where its
// W_UK form is loaded. An engine serving a forced --mla-path holds only that path's form
// (weight_options_for), and the self-check reuses its weights: then that path is the reference,
// the other is n/a, and the chunkings run under the forced path.
struct PathPlan {
  RunSpec reference;
  std::vector<RunSpec> variants;
  std::optional<PathComparison> not_loaded;  // the path whose W_UK form is absent (n/a)
};

PathPlan plan_paths(const Deepseek2Bundle& b) {
  const DeepseekConfig& c = b.config;
  const bool has_mha = c.n_layer == 0 || b.weights.layers[0].w_uk_t;
  const bool has_mqa = c.n_layer == 0 || b.weights.layers[0].w_uk;
  PathPlan plan;
  plan.reference = has_mha ? RunSpec{"mha", MlaPathPolicy::Mha, 0} : RunSpec{"mqa", MlaPathPolicy::Mqa, 0};
  const MlaPathPolicy chunk_policy = has_mha && has_mqa ? MlaPathPolicy::Auto : plan.reference.policy;
  if (has_mha && has_mqa) plan.variants.push_back({"mqa", MlaPathPolicy::Mqa, 0});
  plan.variants.push_back({"1-token prefill", chunk_policy, 1});
  plan.variants.push_back({"chunked prefill (3)", chunk_policy, 3});
  if (!(has_mha && has_mqa)) {
    PathComparison other = named(has_mha ? "mqa" : "mha");
    other.status = CheckStatus::NotApplicable;
    other.note = fmt::format("W_UK not loaded in the {} form (an engine serving --mla-path {})",
                             has_mha ? "absorbed (mqa)" : "decompressed (mha)", plan.reference.name);
    plan.not_loaded = other;
  }
  return plan;
}

// DSA: while a sequence's context fits top_k the indexer selects every row, so the sparse forward
// must equal the dense one (--dsa off); the canaries are cut to fit.
PathComparison dense_vs_sparse(const Deepseek2Bundle& b, const RunSpec& ref_spec, const DoctorOptions& opt,
                               const DoctorReport& r) {
  const DeepseekConfig& c = b.config;
  PathComparison sparse = named("dense vs sparse");
  const int steps = static_cast<int>(std::min<int64_t>(opt.n_greedy, c.indexer_top_k / 2));
  const int64_t fit = c.indexer_top_k - steps;
  if (!c.has_indexer) {
    sparse.status = CheckStatus::NotApplicable;
    sparse.note = "no indexer: the file has dense MLA only";
    return sparse;
  }
  for (const auto& ids : r.canary_tokens) {
    const std::vector<int32_t> cut(ids.begin(), ids.begin() + std::min<int64_t>(fit, ids.size()));
    const PromptRun ref = run_prompt(c, b.weights, cut, ref_spec, nullptr, steps, opt);
    accumulate_comparison(
        ref, run_prompt(c, b.weights, cut, {"dense", ref_spec.policy, 0, false}, &ref.tokens, steps, opt), sparse);
  }
  sparse.note = fmt::format("canaries cut to {} tokens + {} steps: within top_k {} the indexer selects every row", fit,
                            steps, c.indexer_top_k);
  return sparse;
}

// Why a comparison fails its tolerances ("" when it passes).
std::string disagreement(const PathComparison& p, const PathTolerances& tol) {
  double worst_layer = 0;
  size_t at = 0;
  for (size_t l = 0; l < p.layer_rel.size(); ++l)
    if (p.layer_rel[l] > worst_layer) worst_layer = p.layer_rel[l], at = l;
  std::string why;
  if (p.status == CheckStatus::Fail)
    why = p.note;
  else if (!p.greedy_agree)
    why = "greedy tokens differ";
  else if (p.logits_rel > tol.logits)
    why = fmt::format("logits differ by {:.2e} (tolerance {:.0e})", p.logits_rel, tol.logits);
  else if (worst_layer > tol.layer)
    why = fmt::format("blk.{} attention differs by {:.2e} (tolerance {:.0e})", at, worst_layer, tol.layer);
  if (!why.empty() && worst_layer > tol.layer && why.find("attention differs") == std::string::npos)
    why += fmt::format(", first beyond tolerance at blk.{} ({:.2e})", first_bad_layer(p, tol.layer),
                       p.layer_rel[first_bad_layer(p, tol.layer)]);
  return why;
}

// One "paths" check over all comparisons; a failing comparison's status and note say why.
void judge_paths(const DeepseekWeights& w, const DoctorOptions& opt, DoctorReport& r) {
  const PathTolerances tol = path_tolerances(w, opt);
  std::string bad;
  for (auto& p : r.paths) {
    if (p.status == CheckStatus::NotApplicable) continue;
    const std::string why = disagreement(p, tol);
    if (!why.empty()) {
      p.status = CheckStatus::Fail;
      p.note = why;
      bad += fmt::format("{}{} vs {}: {}", bad.empty() ? "" : "; ", p.name, r.reference, why);
    }
  }
  if (bad.empty())
    add_check(r, "paths", CheckStatus::Ok,
              fmt::format("every path agrees with {} ({} attention; layers <= {:.0e}, logits <= {:.0e}, same greedy "
                          "tokens)",
                          r.reference, opt.exact_attention ? "exact" : "f32", tol.layer, tol.logits));
  else
    add_check(r, "paths", CheckStatus::Fail, bad);
}

}  // namespace

std::vector<PromptRun> path_checks(const Deepseek2Bundle& b, const DoctorOptions& opt, bool with_layout,
                                   bool with_numerics, DoctorReport& r) {
  const DeepseekConfig& c = b.config;
  NumericsProbe probe(c, b.weights);
  const PathPlan plan = plan_paths(b);
  r.reference = plan.reference.name;
  if (plan.not_loaded) r.paths.push_back(*plan.not_loaded);
  std::vector<PathComparison> cmp;
  cmp.reserve(plan.variants.size());
  for (const auto& v : plan.variants) cmp.push_back(named(v.name));
  std::vector<PromptRun> refs;
  for (const auto& ids : r.canary_tokens) {
    refs.push_back(
        run_prompt(c, b.weights, ids, plan.reference, nullptr, opt.n_greedy, opt, with_numerics ? &probe : nullptr));
    for (size_t k = 0; k < plan.variants.size(); ++k)
      accumulate_comparison(
          refs.back(), run_prompt(c, b.weights, ids, plan.variants[k], &refs.back().tokens, opt.n_greedy, opt), cmp[k]);
  }
  for (auto& p : cmp) r.paths.push_back(p);
  if (with_layout) run_layout_variant(b.file->path(), b.weights, r.canary_tokens, refs, opt, r);
  r.paths.push_back(dense_vs_sparse(b, plan.reference, opt, r));
  if (with_numerics) {
    r.numerics = probe.layers();
    head_check(head_pairing(probe, c.n_layer, c.n_head), r);
  }
  judge_paths(b.weights, opt, r);
  return refs;
}

}  // namespace mla::doctor

namespace mla {

// With the exact attention kernels (the default) every path gives the same bits, so a difference
// beyond opt's tolerances (1e-4) is a real one. With the F32 kernels (--attention-precision f32) the paths
// differ by ~1e-7 in a layer's output; downstream that can flip one rounding of a cached latent
// value or of a quantized matmul activation, which moves a later layer's attention by a few such
// steps without anything being wrong: the layer tolerance is then at least 4 steps of the coarsest
// rounding the forward applies, and the logits' 1e-2.
PathTolerances path_tolerances(const DeepseekWeights& w, const DoctorOptions& opt) {
  if (opt.exact_attention) return {opt.tol_layer, opt.tol_logits};
  double step = doctor::rounding_of(opt.kv_dtype);
  auto see = [&](const WeightMatrix& m) {
    if (m.n_rows > 0) step = std::max(step, doctor::rounding_of(vec_dot_type(m.type)));
  };
  see(w.output);
  for (const LayerWeights& L : w.layers)
    for (const WeightMatrix* m :
         {&L.attn_q_a, &L.attn_q_b, &L.attn_q, &L.attn_kv_a_mqa, &L.attn_output, &L.ffn_gate, &L.ffn_up, &L.ffn_down,
          &L.ffn_gate_inp, &L.ffn_gate_exps, &L.ffn_up_exps, &L.ffn_gate_up_exps, &L.ffn_down_exps, &L.ffn_gate_shexp,
          &L.ffn_up_shexp, &L.ffn_down_shexp})
      see(*m);
  return {std::max({opt.tol_layer, 1e-3, 4 * step}), std::max(opt.tol_logits, 1e-2)};
}

}  // namespace mla
