#pragma once
// The real ModelRunner: a deepseek2 GGUF (model/deepseek2.h) over a paged latent cache.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/model_runner.h"
#include "kv/latent_cache.h"  // KvCacheOptions
#include "model/deepseek2.h"

namespace mla {

class Deepseek2Runner : public ModelRunner {
 public:
  // Loads path for the policy (which W_UK forms) and allocates the cache. model.max_batch_tokens
  // must cover the engine's max_num_batched_tokens (plus max_num_seqs with speculation: the MTP
  // pass carries up to one row more per sequence). model.mtp: load the MTP layer (the file must
  // have one; a single process only).
  Deepseek2Runner(const std::string& path, MlaPathPolicy policy, const ModelOptions& model, const KvCacheOptions& kv);

  int n_vocab() const override { return static_cast<int>(bundle_->config.n_vocab); }
  int max_context() const override;
  LatentCache& cache() override { return *cache_; }
  uint64_t cache_identity() const override { return cache_identity_; }
  void forward(const BatchMeta& meta, float* logits) override { model_->forward(meta, *cache_, logits); }
  bool has_mtp() const override { return model_->has_mtp(); }
  int hidden_dim() const override { return static_cast<int>(bundle_->config.n_embd); }
  void forward_hidden(const BatchMeta& meta, float* logits, float* hidden) override {
    model_->forward(meta, *cache_, logits, hidden);
  }
  void forward_mtp(const BatchMeta& meta, const float* h_in, float* logits, float* h_out) override {
    model_->forward_mtp(meta, h_in, *cache_, logits, h_out);
  }
  int64_t max_batch_tokens() const override { return max_batch_tokens_; }
  int64_t sparse_layer_tokens() const override {
    return model_->sparse_counters().layer_tokens.load(std::memory_order_relaxed);
  }
  int64_t expert_cache_slots() const override {
    return bundle_->weights.expert_cache ? bundle_->weights.expert_cache->n_slots() : 0;
  }
  ExpertCacheCounters expert_cache_counters() const override { return model_->expert_cache_counters(); }
  int64_t sparse_selected_rows() const override {
    return model_->sparse_counters().selected_rows.load(std::memory_order_relaxed);
  }

  PathTokens path_tokens() const override {
    const PathCounters& p = model_->path_counters();
    return {p.tokens_mha.load(std::memory_order_relaxed), p.tokens_mqa.load(std::memory_order_relaxed)};
  }
  MlaPath auto_prefill_path() const override { return model_->auto_prefill_path(); }
  MlaPathPolicy loaded_path_policy() const override { return loaded_path_policy_; }

  // The loaded file, config and weights (packed copies included), e.g. for the start-up
  // self-check, which runs its own models over them instead of loading the file again.
  const Deepseek2Bundle& bundle() const { return *bundle_; }
  const DeepseekConfig& config() const { return bundle_->config; }
  const DeepseekWeights& weights() const { return bundle_->weights; }
  const MoeCounters& moe_counters() const { return model_->moe_counters(); }
  const StageCounters& stage_counters() const { return model_->stage_counters(); }
  bool exact_attention() const { return model_->options().exact_attention; }
  bool rows_depend_on_phase() const override { return !exact_attention(); }
  int64_t parallel_regions() const { return model_->parallel_regions(); }
  const PathCounters& path_counters() const { return model_->path_counters(); }
  const PathVerifyLog& verify_log() const { return model_->verify_log(); }
  const GgufFile& file() const { return *bundle_->file; }
  // The MTP layer's draft logits of a prompt, for checks against a reference: one prefill of
  // tokens (slot = position), then the MTP rows at positions 1..n-1 in one call; row p
  // ([p * n_vocab ...], p = 0..n-2) from the pair (trunk state at p, tokens[p + 1]). Writes cache
  // slots 0..n-1: call it before an engine computes anything with this runner.
  std::vector<float> mtp_prompt_logits(const std::vector<int32_t>& tokens, MlaPathPolicy policy);
  // tokenizer.ggml.eos_token_id (and eot) when the file has them.
  std::vector<int32_t> eos_token_ids() const;

 private:
  std::unique_ptr<Deepseek2Bundle> bundle_;
  std::unique_ptr<Deepseek2Model> model_;
  std::unique_ptr<LatentCache> cache_;
  int64_t max_batch_tokens_ = 0;
  uint64_t cache_identity_ = 0;
  MlaPathPolicy loaded_path_policy_ = MlaPathPolicy::Auto;
};

}  // namespace mla
