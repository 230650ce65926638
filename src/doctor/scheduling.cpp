// The doctor's scheduling section: each canary through the real engine and scheduler over the
// doctor's weights, with a runner that records what the model did at every step.
#include <fmt/format.h>

#include <algorithm>

#include "doctor/checks.h"
#include "engine/engine.h"
#include "engine/model_runner.h"

namespace mla::doctor {

namespace {

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

}  // namespace

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

}  // namespace mla::doctor
