#include "engine/deepseek2_runner.h"

#include <xxhash.h>

#include <algorithm>
#include <climits>

#include "gguf/gguf.h"
#include "util/error.h"
#include "util/log.h"

namespace mla {

Deepseek2Runner::Deepseek2Runner(const std::string& path, MlaPathPolicy policy, const ModelOptions& model,
                                 const KvCacheOptions& kv) {
  WeightLoadOptions wo = weight_options_for(policy, model.verify_paths);
  const bool several_ranks = model.comm && model.comm->size() > 1;
  wo.prefault = model.prefault && !several_ranks;  // several ranks: each maps its own shard (parallel/)
  // Repacking copies every matrix (reading all of the file), which would undo a rank's shard
  // mapping: several ranks keep the row-major kernels until packing learns the shard ranges.
  if (several_ranks) wo.repack = false;
  if (model.mtp && model.comm && model.comm->size() > 1)
    fail("speculative decoding (method mtp) runs in a single process; this run has {} ranks", model.comm->size());
  wo.load_mtp = model.mtp;
  if (model.weights_memory > 0) {
    if (several_ranks) fail("--weights-memory runs in a single process; this run has {} ranks", model.comm->size());
    wo.expert_cache = {.budget_bytes = model.weights_memory,
                       .max_batch_tokens = model.max_batch_tokens,
                       .eviction = model.expert_eviction,
                       .repack = wo.repack,
                       .io_threads = model.expert_io_threads};
  }
  loaded_path_policy_ = wo.need_mha && wo.need_mqa ? MlaPathPolicy::Auto
                        : wo.need_mha              ? MlaPathPolicy::Mha
                                                   : MlaPathPolicy::Mqa;
  max_batch_tokens_ = model.max_batch_tokens;
  bundle_ = load_deepseek2(path, wo);
  model_ = std::make_unique<Deepseek2Model>(bundle_->config, bundle_->weights, model);
  const LatentShape shape = model_->latent_shape();
  int64_t tokens = kv.tokens;
  // Not capped by the context length: a short-context model still serves many sequences at once.
  if (tokens <= 0 && kv.memory_bytes <= 0) tokens = KvCacheOptions::kDefaultTokens;
  const int32_t n_blocks = blocks_for_capacity(shape, kv.dtype, kv.block_size, tokens, kv.memory_bytes);
  cache_ = std::make_unique<LatentCache>(shape, kv.dtype, kv.block_size, n_blocks);
  // The file, and the options that change what the model writes into the cache: the attention
  // kernels (exact or F32), sparse attention on or off, the MTP layer (its rows are the last
  // layer's). The cache layout is the tier store's to add.
  const uint64_t identity[] = {gguf_file_fingerprint(*bundle_->file), bundle_->file->file_size(),
                               uint64_t{model.exact_attention}, uint64_t{model.dsa}, uint64_t{model_->has_mtp()}};
  cache_identity_ = XXH3_64bits(identity, sizeof identity);
  log().info("kv cache: {}", cache_->describe());
}

int Deepseek2Runner::max_context() const {
  const int64_t n = bundle_->config.n_ctx_train;
  return n > 0 ? static_cast<int>(std::min<int64_t>(n, INT_MAX)) : INT_MAX;
}

std::vector<float> Deepseek2Runner::mtp_prompt_logits(const std::vector<int32_t>& tokens, MlaPathPolicy policy) {
  if (!has_mtp()) fail("mtp logits: the model's MTP layer is not loaded");
  const auto n = static_cast<int32_t>(tokens.size());
  if (n < 2) fail("mtp logits: the prompt needs at least 2 tokens, it has {}", n);
  if (n > cache_->n_slots()) fail("mtp logits: the prompt has {} tokens, the cache holds {}", n, cache_->n_slots());
  const auto E = static_cast<size_t>(bundle_->config.n_embd);
  // The trunk over slots 0..n-1 (one-slot addressing: context position j is slot j).
  BatchMeta trunk = single_sequence_batch(tokens, 0, false, policy);
  trunk.logits_rows.clear();
  std::vector<float> hidden(n * E);
  model_->forward(trunk, *cache_, nullptr, hidden.data());
  // MTP rows 1..n-1 over its own rows at positions 1..q.
  BatchMeta m;
  SeqMeta s;
  s.query_len = n - 1;
  s.context_len = n - 1;
  for (int32_t q = 1; q < n; ++q) {
    m.token_ids.push_back(tokens[q]);
    m.positions.push_back(q);
    m.slot_mapping.push_back(q);
    m.context_slots.push_back(q);
    m.logits_rows.push_back(q - 1);
  }
  m.seqs.push_back(s);
  m.policy = policy;
  std::vector<float> logits(static_cast<size_t>(n - 1) * n_vocab()), h_out((n - 1) * E);
  model_->forward_mtp(m, hidden.data(), *cache_, logits.data(), h_out.data());
  return logits;
}

std::vector<int32_t> gguf_eos_token_ids(const GgufFile& f, int64_t n_vocab) {
  std::vector<int32_t> ids;
  // End of message too: llama.cpp counts eom among its end-of-generation tokens (a turn that
  // ends in tool calls, for the vocabularies that have one).
  for (const char* key :
       {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    auto v = f.opt_uint(key);
    if (!v || *v >= static_cast<uint64_t>(n_vocab)) continue;
    const auto id = static_cast<int32_t>(*v);
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  return ids;
}

std::vector<int32_t> Deepseek2Runner::eos_token_ids() const { return gguf_eos_token_ids(*bundle_->file, n_vocab()); }

}  // namespace mla
