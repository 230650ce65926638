#include "doctor/doctor.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>

#include "doctor/runs.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "gguf/gguf.h"
#include "model/synth.h"
#include "quant/quant.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/log.h"

namespace mla {

std::string_view check_status_name(CheckStatus s) {
  switch (s) {
    case CheckStatus::Ok:
      return "ok";
    case CheckStatus::Warn:
      return "warn";
    case CheckStatus::Fail:
      return "FAIL";
    case CheckStatus::NotApplicable:
      return "n/a";
  }
  return "?";
}

const char* doctor_long_canary() {
  return "The quick brown fox jumps over the lazy dog. A function returns a value, and a class "
         "groups data with the methods that work on it.";
}

const char* doctor_english_text() {
  return "Python is a programming language that lets you work quickly and integrate systems more "
         "effectively. A program is a sequence of statements. Each statement is executed in order, "
         "from the top of the file to the bottom, unless a loop or a function call changes the flow. "
         "A variable is a name that refers to a value. Values have types: a number, a string of text, "
         "a list of other values, or a dictionary that maps keys to values. A function is defined with "
         "the def keyword, takes arguments, and returns a result. Modules group related functions and "
         "classes so that other programs can import and use them. The standard library provides many "
         "modules for common tasks, such as reading files, working with dates, and handling errors.";
}

namespace {

using doctor::PromptRun;
using doctor::RunSpec;

struct Loaded {
  std::unique_ptr<Deepseek2Bundle> bundle;
  std::unique_ptr<Tokenizer> tokenizer;
};

void add_check(DoctorReport& r, std::string name, CheckStatus st, std::string detail) {
  r.checks.push_back({std::move(name), st, std::move(detail)});
}

std::string tensor_role(const std::string& n) {
  if (n == "token_embd.weight" || n == "output.weight") return "embeddings";
  if (n.find(".nextn.") != std::string::npos) return "mtp";
  if (n.find("indexer") != std::string::npos) return "indexer";
  if (n.find("norm") != std::string::npos) return "norms";
  if (n.find("_exps") != std::string::npos) return "experts";
  if (n.find("_shexp") != std::string::npos) return "shared experts";
  if (n.find("ffn_gate_inp") != std::string::npos || n.find("exp_probs_b") != std::string::npos) return "router";
  if (n.find(".attn_") != std::string::npos) return "attention";
  if (n.find(".ffn_") != std::string::npos) return "dense ffn";
  return "other";
}

// File facts that need only the parsed GGUF (reported even when the config or weights fail).
void describe_file(const GgufFile& f, DoctorReport& r) {
  if (auto a = f.opt_string("general.architecture")) r.architecture = *a;
  if (auto n = f.opt_int("split.count"); n && *n > 1) r.shards = fmt::format("{} (split.count)", *n);
  std::map<std::pair<std::string, std::string>, TensorTypeCount> by_role;
  int64_t n_indexer = 0, n_mtp = 0;
  for (const auto& t : f.tensors()) {
    const std::string role = tensor_role(t.name);
    auto& e = by_role[{role, std::string(ggml_type_name(t.type))}];
    e.role = role;
    e.type = ggml_type_name(t.type);
    e.n_tensors++;
    e.n_bytes += static_cast<int64_t>(t.n_bytes);
    n_indexer += role == "indexer";
    n_mtp += role == "mtp";
  }
  for (auto& [k, v] : by_role) r.types.push_back(v);
  const bool split = f.find_tensor("blk.0.attn_k_b.weight") || f.find_tensor("blk.0.attn_v_b.weight");
  r.mla_layout = split                                     ? "split (attn_k_b + attn_v_b)"
                 : f.find_tensor("blk.0.attn_kv_b.weight") ? "fused (attn_kv_b)"
                                                           : "none found in blk.0";
  if (n_indexer > 0) r.indexer = fmt::format("present ({} tensors)", n_indexer);
  const auto nextn = f.opt_int(r.architecture + ".nextn_predict_layers");
  if (n_mtp > 0 || (nextn && *nextn > 0))
    r.mtp = fmt::format("present ({} nextn layer(s), {} tensors)", nextn.value_or(0), n_mtp);
}

// Silent defaults that change the math: a key the loader defaulted while its neighbours say the
// file meant something else.
void keys_check(const GgufFile& f, const DeepseekConfig& c, DoctorReport& r) {
  for (const auto& k : deepseek_config_key_states(f, c))
    if (!k.present) r.absent_keys.push_back({k.key, k.value.empty() ? "\"\"" : k.value});
  const std::string prefix = std::string(model_arch_name(c.arch)) + ".";
  const std::string rs = prefix + "rope.scaling.";
  std::vector<std::string> fails, warns;
  std::string orphans;
  for (const char* sub :
       {"factor", "original_context_length", "yarn_log_multiplier", "yarn_beta_fast", "yarn_beta_slow"})
    if (f.has(rs + sub)) orphans += (orphans.empty() ? "" : ", ") + std::string(sub);
  const std::string& type = c.rope_scaling_type;
  if (!f.has(rs + "type") && !orphans.empty())
    fails.push_back(
        fmt::format("{}type is absent (default: none) but {} {} present: that RoPE scaling is not "
                    "applied",
                    rs, orphans, orphans.find(',') == std::string::npos ? "is" : "are"));
  if ((type == "yarn" || type == "linear") && !f.has(rs + "factor"))
    fails.push_back(fmt::format("{}factor is absent (default 1): the '{}' scaling is a no-op", rs, type));
  if (type == "yarn" && !f.has(rs + "original_context_length"))
    warns.push_back(fmt::format("{}original_context_length absent: took context_length {}", rs, c.n_ctx_train));
  if (type == "yarn" && !f.has(rs + "yarn_log_multiplier"))
    warns.push_back(fmt::format("{}yarn_log_multiplier absent: no YaRN mscale in the attention scale", rs));
  const bool has_bias = f.find_tensor(fmt::format("blk.{}.exp_probs_b.bias", c.n_layer_dense_lead)) != nullptr;
  if (has_bias && !f.has(prefix + "expert_gating_func"))
    warns.push_back("expert_gating_func absent (default softmax) in a file with exp_probs_b (V3 style, sigmoid)");
  if (!fails.empty()) {
    std::string d = fails[0];
    for (size_t i = 1; i < fails.size(); ++i) d += "; " + fails[i];
    add_check(r, "keys", CheckStatus::Fail, d);
  } else if (!warns.empty()) {
    std::string d = warns[0];
    for (size_t i = 1; i < warns.size(); ++i) d += "; " + warns[i];
    add_check(r, "keys", CheckStatus::Warn, d);
  } else {
    add_check(r, "keys", CheckStatus::Ok,
              fmt::format("{} optional key(s) absent, none of them contradicted by the file", r.absent_keys.size()));
  }
}

std::vector<int32_t> canary_ids(const Tokenizer* tok, const std::string& text, int64_t n_vocab) {
  std::vector<int32_t> ids;
  if (tok) {
    EncodeOptions eo;
    eo.add_special = true;
    for (TokenId t : tok->encode(text, eo)) ids.push_back(t);
  } else {  // no tokenizer: a fixed id sequence stands in for the text
    for (size_t i = 0; i < std::max<size_t>(text.size() / 4, 1); ++i)
      ids.push_back(static_cast<int32_t>((7 * i + 1) % n_vocab));
  }
  if (ids.empty()) fail("doctor: canary '{}' encodes to no tokens", text);
  return ids;
}

PathComparison named(std::string name) {
  PathComparison p;
  p.name = std::move(name);
  return p;
}

// The file in the other MLA layout: convert_mla_layout into a temporary file, which is removed
// as soon as it is mapped (the mapping keeps its pages). The conversion copies every tensor but
// the MLA projections unchanged, so only W_UK / W_UV are taken from the copy (bound without
// repacking or prefaulting it) and the rest are w's own, packed copies included: the doctor holds
// one repacked copy of the weights, and the comparison differs in the layout alone.
std::unique_ptr<Deepseek2Bundle> load_other_layout(const std::string& path, const DeepseekWeights& w,
                                                   MlaLayout target) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "mla-doctor-layout-XXXXXX").string();
  const int fd = mkstemp(tmpl.data());
  if (fd < 0) fail("doctor: cannot create a temporary file in {}", std::filesystem::temp_directory_path().string());
  close(fd);
  struct Remove {
    std::string p;
    ~Remove() { std::filesystem::remove(p); }
  } remove{tmpl};
  convert_mla_layout(path, tmpl, target);
  auto b = std::make_unique<Deepseek2Bundle>();
  b->file = GgufFile::open(tmpl);
  b->config = load_deepseek_config(*b->file);
  WeightLoadOptions wo = weight_options_for(MlaPathPolicy::Auto, true);
  wo.repack = false;
  const DeepseekWeights converted = bind_deepseek_weights(*b->file, b->config, wo);
  b->weights = w;
  b->weights.layout = converted.layout;
  for (size_t il = 0; il < w.layers.size(); ++il) {
    LayerWeights& L = b->weights.layers[il];
    const LayerWeights& from = converted.layers[il];
    L.w_uk = from.w_uk;
    L.w_uk_t = from.w_uk_t;
    L.w_uv = from.w_uv;
    L.mla_f32 = from.mla_f32;
  }
  return b;
}

void run_layout_variant(const std::string& path, const DeepseekWeights& w,
                        const std::vector<std::vector<int32_t>>& canaries, const std::vector<PromptRun>& refs,
                        const DoctorOptions& opt, DoctorReport& r) {
  const bool to_fused = w.layout == MlaLayout::Split;
  const std::string lname = to_fused ? "fused layout" : "split layout";
  PathComparison mha = named(lname + ", mha"), mqa = named(lname + ", mqa");
  auto skip = [&](const std::string& why) {
    for (auto* p : {&mha, &mqa}) {
      p->status = CheckStatus::NotApplicable;
      p->note = why;
      r.paths.push_back(*p);
    }
  };
  const int64_t size = static_cast<int64_t>(std::filesystem::file_size(path));
  if (!opt.layout) return skip("skipped (--no-layout)");
  if (size > opt.layout_max_bytes)
    return skip(fmt::format("skipped: the copy would take {:.1f} GiB (limit --layout-max-bytes {:.1f} GiB)",
                            size / 1073741824.0, opt.layout_max_bytes / 1073741824.0));
  std::unique_ptr<Deepseek2Bundle> other;
  try {
    other = load_other_layout(path, w, to_fused ? MlaLayout::Fused : MlaLayout::Split);
  } catch (const Error& e) {
    for (auto* p : {&mha, &mqa}) {
      p->status = CheckStatus::Fail;
      p->note = fmt::format("the {} copy does not load: {}", lname, e.what());
      r.paths.push_back(*p);
    }
    return;
  }
  for (size_t i = 0; i < canaries.size(); ++i) {
    const int n = static_cast<int>(refs[i].tokens.size());
    doctor::accumulate_comparison(refs[i],
                                  doctor::run_prompt(other->config, other->weights, canaries[i],
                                                     {mha.name, MlaPathPolicy::Mha, 0}, &refs[i].tokens, n, opt),
                                  mha);
    doctor::accumulate_comparison(refs[i],
                                  doctor::run_prompt(other->config, other->weights, canaries[i],
                                                     {mqa.name, MlaPathPolicy::Mqa, 0}, &refs[i].tokens, n, opt),
                                  mqa);
  }
  r.paths.push_back(mha);
  r.paths.push_back(mqa);
}

// A trained file's W_UK heads pair with their own queries; another order carrying clearly more
// score energy means the heads are stored permuted (the same on every path: no path check sees it).
void head_check(const doctor::HeadPairing& hp, DoctorReport& r) {
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

// The canaries through every path against MHA (the reference); returns the reference runs.
std::vector<PromptRun> path_checks(const Deepseek2Bundle& b, const DoctorOptions& opt, bool with_layout,
                                   bool with_numerics, DoctorReport& r) {
  const DeepseekConfig& c = b.config;
  doctor::NumericsProbe probe(c, b.weights);
  std::vector<PromptRun> refs;
  // The reference is MHA where its W_UK form is loaded. An engine serving a forced --mla-path
  // holds only that path's form (weight_options_for), and the self-check reuses its weights: then
  // that path is the reference, the other is n/a, and the chunkings run under the forced path.
  const bool has_mha = c.n_layer == 0 || b.weights.layers[0].w_uk_t;
  const bool has_mqa = c.n_layer == 0 || b.weights.layers[0].w_uk;
  const RunSpec ref_spec = has_mha ? RunSpec{"mha", MlaPathPolicy::Mha, 0} : RunSpec{"mqa", MlaPathPolicy::Mqa, 0};
  const MlaPathPolicy chunk_policy = has_mha && has_mqa ? MlaPathPolicy::Auto : ref_spec.policy;
  r.reference = ref_spec.name;
  std::vector<RunSpec> variants;
  if (has_mha && has_mqa) variants.push_back({"mqa", MlaPathPolicy::Mqa, 0});
  variants.push_back({"1-token prefill", chunk_policy, 1});
  variants.push_back({"chunked prefill (3)", chunk_policy, 3});
  std::vector<PathComparison> cmp;
  cmp.reserve(variants.size());
  for (const auto& v : variants) cmp.push_back(named(v.name));
  if (!(has_mha && has_mqa)) {
    PathComparison other = named(has_mha ? "mqa" : "mha");
    other.status = CheckStatus::NotApplicable;
    other.note = fmt::format("W_UK not loaded in the {} form (an engine serving --mla-path {})",
                             has_mha ? "absorbed (mqa)" : "decompressed (mha)", ref_spec.name);
    r.paths.push_back(other);
  }
  for (const auto& ids : r.canary_tokens) {
    refs.push_back(
        doctor::run_prompt(c, b.weights, ids, ref_spec, nullptr, opt.n_greedy, opt, with_numerics ? &probe : nullptr));
    for (size_t k = 0; k < variants.size(); ++k)
      doctor::accumulate_comparison(
          refs.back(), doctor::run_prompt(c, b.weights, ids, variants[k], &refs.back().tokens, opt.n_greedy, opt),
          cmp[k]);
  }
  for (auto& p : cmp) r.paths.push_back(p);
  if (with_layout) run_layout_variant(b.file->path(), b.weights, r.canary_tokens, refs, opt, r);
  // DSA: while a sequence's context fits top_k the indexer selects every row, so the sparse forward
  // must equal the dense one (--dsa off); the canaries are cut to fit.
  PathComparison sparse = named("dense vs sparse");
  const int steps = static_cast<int>(std::min<int64_t>(opt.n_greedy, c.indexer_top_k / 2));
  const int64_t fit = c.indexer_top_k - steps;
  if (!c.has_indexer) {
    sparse.status = CheckStatus::NotApplicable;
    sparse.note = "no indexer: the file has dense MLA only";
  } else {
    for (const auto& ids : r.canary_tokens) {
      const std::vector<int32_t> cut(ids.begin(), ids.begin() + std::min<int64_t>(fit, ids.size()));
      const PromptRun ref = doctor::run_prompt(c, b.weights, cut, ref_spec, nullptr, steps, opt);
      doctor::accumulate_comparison(
          ref, doctor::run_prompt(c, b.weights, cut, {"dense", ref_spec.policy, 0, false}, &ref.tokens, steps, opt),
          sparse);
    }
    sparse.note = fmt::format("canaries cut to {} tokens + {} steps: within top_k {} the indexer selects every row",
                              fit, steps, c.indexer_top_k);
  }
  r.paths.push_back(sparse);
  if (with_numerics) {
    r.numerics = probe.layers();
    head_check(doctor::head_pairing(probe, c.n_layer, c.n_head), r);
  }

  // One check over all comparisons.
  const PathTolerances tol = path_tolerances(b.weights, opt);
  const double tol_layer = tol.layer;
  std::string bad;
  for (auto& p : r.paths) {
    if (p.status == CheckStatus::NotApplicable) continue;
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
    else if (worst_layer > tol_layer)
      why = fmt::format("blk.{} attention differs by {:.2e} (tolerance {:.0e})", at, worst_layer, tol_layer);
    if (!why.empty() && worst_layer > tol_layer && why.find("attention differs") == std::string::npos)
      why += fmt::format(", first beyond tolerance at blk.{} ({:.2e})", first_bad_layer(p, tol_layer),
                         p.layer_rel[first_bad_layer(p, tol_layer)]);
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
                          r.reference, opt.exact_attention ? "exact" : "f32", tol_layer, tol.logits));
  else
    add_check(r, "paths", CheckStatus::Fail, bad);
  return refs;
}

void numerics_checks(const DeepseekConfig& c, DoctorReport& r) {
  constexpr double kF16Max = 65504.0;
  std::string over, close;
  double worst_bf16 = 0, worst_cache = 0;
  for (const auto& n : r.numerics) {
    const double m = std::max({n.max_q_absorbed, n.max_attn_out, n.max_latent});
    if (m > kF16Max || !std::isfinite(n.score_err_f16))
      over += fmt::format("{}blk.{} (q·W_UK {:.3g}, attn·W_UV {:.3g}, latent {:.3g})", over.empty() ? "" : ", ",
                          n.layer, n.max_q_absorbed, n.max_attn_out, n.max_latent);
    else if (m > kF16Max / 16)
      close += fmt::format("{}blk.{} ({:.3g})", close.empty() ? "" : ", ", n.layer, m);
    worst_bf16 = std::max(worst_bf16, n.score_err_bf16);
    worst_cache = std::max(worst_cache, n.cache_rel_err);
  }
  if (!over.empty())
    add_check(r, "overflow", CheckStatus::Fail, "an F16 absorbed path would overflow (> 65504) in " + over);
  else if (!close.empty())
    add_check(r, "overflow", CheckStatus::Warn, "within 16x of the F16 limit in " + close);
  else
    add_check(r, "overflow", CheckStatus::Ok,
              "every absorbed product and latent value is within 1/16 of the F16 range");
  // A softmax logit off by more than 1 changes that weight by more than e times.
  add_check(r, "bf16", worst_bf16 > 1 ? CheckStatus::Warn : CheckStatus::Ok,
            fmt::format("absorbed scores with BF16 inputs are off by up to {:.3g} (softmax logit units; warn above 1)",
                        worst_bf16));
  add_check(
      r, "cache", worst_cache > 2e-2 ? CheckStatus::Warn : CheckStatus::Ok,
      fmt::format("the {} latent cache keeps rows to {:.2e} relative (warn above 2e-2)", r.kv_dtype, worst_cache));
}

void output_checks(const DeepseekConfig& c, const Deepseek2Bundle& b, const Tokenizer* tok, const PromptRun& ref,
                   const DoctorOptions& opt, DoctorReport& r) {
  const int64_t V = c.n_vocab;
  r.n_vocab = V;
  r.max_entropy = std::log(static_cast<double>(V));
  for (size_t i = 0; i < ref.tokens.size(); ++i) {
    const auto lp = doctor::log_softmax(ref.logits[i].data(), V);
    if (i == 0)
      for (double x : lp) r.first_entropy -= std::exp(x) * x;
    const int32_t id = ref.tokens[i];
    r.greedy.push_back({id, tok ? tok->decode(std::vector<TokenId>{id}) : std::string(), std::exp(lp[id])});
  }
  std::vector<std::string> flags;
  bool random_like = false;
  if (r.first_entropy > 0.9 * r.max_entropy) {
    flags.push_back(
        fmt::format("first distribution near-uniform (entropy {:.2f} of {:.2f} nats)", r.first_entropy, r.max_entropy));
    random_like = true;
  }
  if (r.greedy.size() >= 4 &&
      std::all_of(r.greedy.begin(), r.greedy.end(), [&](const GreedyToken& g) { return g.id == r.greedy[0].id; }))
    flags.push_back(fmt::format("one token repeats ({} x id {})", r.greedy.size(), r.greedy[0].id));
  if (tok) {
    EncodeOptions eo;
    eo.add_special = true;
    std::vector<int32_t> ids;
    for (TokenId t : tok->encode(doctor_english_text(), eo)) ids.push_back(t);
    const int64_t cap = std::min<int64_t>({128, c.n_ctx_train > 0 ? c.n_ctx_train : 128});
    if (static_cast<int64_t>(ids.size()) > cap) ids.resize(cap);
    if (ids.size() >= 8) {
      ModelOptions mo;
      mo.n_threads = opt.n_threads;
      mo.max_batch_tokens = static_cast<int64_t>(ids.size());
      Deepseek2Model model(c, b.weights, mo);
      LatentCache cache = model.make_cache(static_cast<int64_t>(ids.size()), opt.kv_dtype);
      std::vector<float> logits(ids.size() * V);
      model.forward(single_sequence_batch(ids, 0, true, MlaPathPolicy::Mha), cache, logits.data());
      double nll = 0;
      for (size_t t = 0; t + 1 < ids.size(); ++t) nll -= doctor::log_softmax(logits.data() + t * V, V)[ids[t + 1]];
      r.ppl_tokens = static_cast<int64_t>(ids.size()) - 1;
      r.ppl = std::exp(nll / r.ppl_tokens);
      if (!std::isfinite(r.ppl) || r.ppl > V / 4.0) {
        flags.push_back(
            fmt::format("perplexity {:.4g} of the built-in English text is near the vocabulary size {}", r.ppl, V));
        random_like = true;
      } else if (r.ppl > 1000) {
        flags.push_back(fmt::format("perplexity {:.4g} of the built-in English text is above 1000", r.ppl));
      }
    }
  }
  if (flags.empty()) {
    add_check(r, "output", CheckStatus::Ok,
              r.ppl > 0 ? fmt::format("perplexity {:.4g} on {} tokens of English, first-token entropy {:.2f} nats",
                                      r.ppl, r.ppl_tokens, r.first_entropy)
                        : std::string("no tokenizer: only the distribution checks ran"));
    return;
  }
  std::string d = random_like ? "random/untrained: " : "";
  for (size_t i = 0; i < flags.size(); ++i) d += (i ? "; " : "") + flags[i];
  add_check(r, "output", CheckStatus::Fail, d);
}

// A runner over the real forward (the doctor's loaded weights) that records, for each engine
// step, the MLA paths the model sent the step's tokens down (its own PathCounters), so the lines
// show the scheduler's steps and the model's decisions, sparse overrides included.
class RecordingRunner : public ModelRunner {
 public:
  RecordingRunner(const Deepseek2Bundle& b, int n_threads, int64_t max_batch_tokens, int32_t n_blocks,
                  std::vector<std::string>& lines)
      : c_(b.config),
        model_(b.config, b.weights, options(n_threads, max_batch_tokens)),
        cache_(model_.latent_shape(), GgmlType::F32, 16, n_blocks),
        max_batch_tokens_(max_batch_tokens),
        lines_(lines) {}
  int n_vocab() const override { return static_cast<int>(c_.n_vocab); }
  int max_context() const override { return static_cast<int>(std::max<int64_t>(c_.n_ctx_train, 1)); }
  LatentCache& cache() override { return cache_; }
  int64_t max_batch_tokens() const override { return max_batch_tokens_; }
  MlaPath auto_prefill_path() const override { return model_.auto_prefill_path(); }
  PathTokens path_tokens() const override {
    return {model_.path_counters().tokens_mha.load(), model_.path_counters().tokens_mqa.load()};
  }
  void forward(const BatchMeta& b, float* logits) override {
    const PathTokens before = path_tokens();
    model_.forward(b, cache_, logits);
    const PathTokens after = path_tokens();
    const int64_t mha = after.mha - before.mha, mqa = after.mqa - before.mqa;
    std::string lens;
    for (const auto& s : b.seqs) lens += fmt::format("{}{}", lens.empty() ? "" : ",", s.query_len);
    // One sequence per step here (max_num_seqs 1): all its tokens took one path, or the line says so.
    const std::string took = mqa == 0 ? "mha" : mha == 0 ? "mqa" : "mixed";
    lines_.push_back(fmt::format(
        "step {}: model sent tokens_mqa={} tokens_mha={} total_toks={} is_sparse={} "
        "policy={} (query {}->{})",
        ++step_, mqa, mha, b.n_tokens(), model_.sparse() ? 1 : 0, mla_path_policy_name(b.policy), lens, took));
  }

 private:
  static ModelOptions options(int n_threads, int64_t max_batch_tokens) {
    ModelOptions mo;
    mo.n_threads = n_threads;
    mo.max_batch_tokens = max_batch_tokens;
    return mo;
  }
  const DeepseekConfig& c_;
  Deepseek2Model model_;
  LatentCache cache_;
  int64_t max_batch_tokens_;
  std::vector<std::string>& lines_;
  int step_ = 0;
};

void scheduling_section(const Deepseek2Bundle& b, const DoctorOptions& opt, DoctorReport& r) {
  std::vector<std::pair<std::string, std::vector<int32_t>>> cases;
  for (size_t i = 0; i < r.canary_tokens.size(); ++i) cases.push_back({r.canary_texts[i], r.canary_tokens[i]});
  cases.push_back({fmt::format("(a 1-token prompt: id {})", r.canary_tokens[0].back()), {r.canary_tokens[0].back()}});
  for (const auto& [text, ids] : cases) {
    std::vector<std::string> lines;
    const int n_new = 2;
    const int32_t n_blocks = static_cast<int32_t>((ids.size() + n_new + 15) / 16 + 1);
    EngineConfig ec;
    ec.max_num_batched_tokens = opt.max_num_batched_tokens;
    ec.max_num_seqs = 1;
    ec.enable_prefix_caching = false;
    ec.max_model_len = n_blocks * 16;
    ec.path_policy = MlaPathPolicy::Auto;
    // The model's batch covers the budget (the canaries are short: a prompt is one step).
    const int64_t max_batch = std::min<int64_t>(opt.max_num_batched_tokens, static_cast<int64_t>(ids.size()) + n_new);
    Engine engine(std::make_unique<RecordingRunner>(b, opt.n_threads, max_batch, n_blocks, lines), ec);
    SamplingParams sp;
    sp.temperature = 0;
    sp.max_tokens = n_new;
    sp.ignore_eos = true;
    auto stream = engine.add_request("doctor", ids, sp);
    engine.run_until_idle();
    r.dispatch.push_back(fmt::format("canary \"{}\" ({} tokens, budget {} tokens/step, {} new):", text, ids.size(),
                                     opt.max_num_batched_tokens, n_new));
    for (auto& l : lines) r.dispatch.push_back("  " + l);
  }
}

void finish_verdict(DoctorReport& r) {
  std::string failed;
  bool only_output_random = true;
  for (const auto& k : r.checks)
    if (k.status == CheckStatus::Fail) {
      failed += fmt::format("{}{}: {}", failed.empty() ? "" : "; ", k.name, k.detail);
      if (k.name != "output" || k.detail.rfind("random/untrained", 0) != 0) only_output_random = false;
    }
  if (failed.empty()) {
    r.verdict = "ok";
    r.verdict_line = "ok";
  } else if (only_output_random) {
    r.verdict = "untrained";
    r.verdict_line = "untrained: " + failed +
                     " (the checks of layout, paths and numerics pass: untrained weights, or weights wrong the same "
                     "way on every path)";
  } else {
    r.verdict = "FAIL";
    r.verdict_line = "FAIL: " + failed;
  }
}

std::unique_ptr<Deepseek2Bundle> load_for_doctor(const std::string& path, DoctorReport& r,
                                                 std::unique_ptr<Tokenizer>& tok) {
  auto b = std::make_unique<Deepseek2Bundle>();
  b->file = GgufFile::open(path);
  describe_file(*b->file, r);
  b->config = load_deepseek_config(*b->file);
  b->weights = bind_deepseek_weights(*b->file, b->config, weight_options_for(MlaPathPolicy::Auto, true));
  try {
    tok = Tokenizer::from_gguf(*b->file);
  } catch (const Error& e) {
    log().warn("doctor: no usable tokenizer ({}); canaries become fixed token ids", e.what());
  }
  return b;
}

void set_canaries(const DoctorOptions& opt, const Tokenizer* tok, int64_t n_vocab, DoctorReport& r) {
  for (const auto& p : opt.prompts) {
    r.canary_texts.push_back(std::string(p.empty() ? doctor_long_canary() : p) +
                             (tok ? "" : " [no tokenizer in the file: fixed token ids stand in]"));
    r.canary_tokens.push_back(canary_ids(tok, p.empty() ? doctor_long_canary() : p, n_vocab));
  }
  if (r.canary_tokens.empty()) fail("doctor: no canary prompt");
}

}  // namespace

// With the exact attention kernels (the default) every path gives the same bits, so a difference
// beyond opt's tolerances (1e-4) is a real one. With the F32 kernels (--attention-precision f32) the paths
// differ by ~1e-7 in a layer's output; downstream that can flip one rounding of a cached latent
// value or of a quantized matmul activation, which moves a later layer's attention by a few such
// steps without anything being wrong: the layer tolerance is then at least 4 steps of the coarsest
// rounding the forward applies, and the logits' 1e-2.
PathTolerances path_tolerances(const DeepseekWeights& w, const DoctorOptions& opt) {
  if (opt.exact_attention) return {opt.tol_layer, opt.tol_logits};
  double step = rounding_of(opt.kv_dtype);
  auto see = [&](const WeightMatrix& m) {
    if (m.n_rows > 0) step = std::max(step, rounding_of(vec_dot_type(m.type)));
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

DoctorReport run_doctor(const std::string& path, const DoctorOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  DoctorReport r;
  r.path = path;
  r.kv_dtype = ggml_type_name(opt.kv_dtype);
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<Deepseek2Bundle> b;
  try {
    b = load_for_doctor(path, r, tok);
  } catch (const Error& e) {
    add_check(r, "load", CheckStatus::Fail, e.what());
    finish_verdict(r);
    return r;
  }
  add_check(r, "load", CheckStatus::Ok, "config and every tensor's shape and type as expected");
  const DeepseekConfig& c = b->config;
  r.config_summary = describe_deepseek_config(c);
  keys_check(*b->file, c, r);
  set_canaries(opt, tok.get(), c.n_vocab, r);
  const std::vector<PromptRun> refs = path_checks(*b, opt, /*with_layout=*/true, opt.numerics, r);
  if (opt.numerics) numerics_checks(c, r);
  if (opt.scheduling) scheduling_section(*b, opt, r);
  if (opt.output) output_checks(c, *b, tok.get(), refs[0], opt, r);
  finish_verdict(r);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

DoctorReport run_path_self_check(const Deepseek2Bundle& b, const Tokenizer* tok, const DoctorOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  DoctorReport r;
  r.path = b.file->path();
  r.kv_dtype = ggml_type_name(opt.kv_dtype);
  set_canaries(opt, tok, b.config.n_vocab, r);
  path_checks(b, opt, false, false, r);
  finish_verdict(r);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

void apply_self_check(std::string_view mode, const DoctorReport& r) {
  if (mode == "off") return;
  if (r.ok()) {
    std::string agree = r.reference, unchecked, ran;
    for (const auto& p : r.paths) {
      if (p.status == CheckStatus::Ok) agree += ", " + p.name;
      if (p.status == CheckStatus::NotApplicable && (p.name == "mha" || p.name == "mqa"))
        unchecked += fmt::format("; {} not checked: {}", p.name, p.note);
      // What the auto runs actually ran, as their models counted it.
      if (p.name == "chunked prefill (3)")
        ran = fmt::format("; auto ran mqa {} / mha {} tokens", p.tokens_mqa, p.tokens_mha);
    }
    log().info("self-check: ok ({} agree on {} canaries{}{}; {:.2f} s)", agree, r.canary_tokens.size(), ran, unchecked,
               r.seconds);
  } else if (mode == "warn") {
    log().warn("self-check: {} (serving anyway: --self-check=warn)", r.verdict_line);
  } else {
    fail("self-check: {} (refusing to serve; --self-check=warn serves anyway)", r.verdict_line);
  }
}

}  // namespace mla
