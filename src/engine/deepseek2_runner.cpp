#include "engine/deepseek2_runner.h"

#include <algorithm>
#include <climits>

#include "gguf/gguf.h"
#include "util/log.h"

namespace mla {

Deepseek2Runner::Deepseek2Runner(const std::string& path, MlaPathPolicy policy, const ModelOptions& model,
                                 const KvCacheOptions& kv) {
  WeightLoadOptions wo = weight_options_for(policy, model.verify_paths);
  wo.prefault = !model.comm || model.comm->size() == 1;  // several ranks: each maps its own shard (parallel/)
  // Repacking copies every matrix (reading all of the file), which would undo a rank's shard
  // mapping: several ranks keep the row-major kernels until packing learns the shard ranges.
  if (!wo.prefault) wo.repack = false;
  bundle_ = load_deepseek2(path, wo);
  model_ = std::make_unique<Deepseek2Model>(bundle_->config, bundle_->weights, model);
  const LatentShape shape = model_->latent_shape();
  int64_t tokens = kv.tokens;
  // Not capped by the context length: a short-context model still serves many sequences at once.
  if (tokens <= 0 && kv.memory_bytes <= 0) tokens = KvCacheOptions::kDefaultTokens;
  const int32_t n_blocks = blocks_for_capacity(shape, kv.dtype, kv.block_size, tokens, kv.memory_bytes);
  cache_ = std::make_unique<LatentCache>(shape, kv.dtype, kv.block_size, n_blocks);
  log().info("kv cache: {}", cache_->describe());
}

int Deepseek2Runner::max_context() const {
  const int64_t n = bundle_->config.n_ctx_train;
  return n > 0 ? static_cast<int>(std::min<int64_t>(n, INT_MAX)) : INT_MAX;
}

std::vector<int32_t> Deepseek2Runner::eos_token_ids() const {
  std::vector<int32_t> ids;
  // End of message too: llama.cpp counts eom among its end-of-generation tokens (a turn that
  // ends in tool calls, for the vocabularies that have one).
  for (const char* key :
       {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    auto v = bundle_->file->opt_uint(key);
    if (!v || *v >= static_cast<uint64_t>(n_vocab())) continue;
    const auto id = static_cast<int32_t>(*v);
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  return ids;
}

}  // namespace mla
