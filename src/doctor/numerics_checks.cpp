// The doctor's numerics and output checks: magnitudes against the F16 range, BF16 score error and
// the cache's round trip (from the numerics probe), then whether the output looks trained.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "doctor/checks.h"
#include "engine/batch_meta.h"
#include "tokenizer/tokenizer.h"

namespace mla::doctor {

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
    const auto lp = log_softmax(ref.logits[i].data(), V);
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
      for (size_t t = 0; t + 1 < ids.size(); ++t) nll -= log_softmax(logits.data() + t * V, V)[ids[t + 1]];
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

}  // namespace mla::doctor
