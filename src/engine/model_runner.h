#pragma once
// What the engine needs from a model: one forward call per step over a BatchMeta, and the latent
// cache it reads and writes. The real runners wrap the deepseek2 forward (engine/deepseek2_runner.h)
// and the deepseek4 one (engine/deepseek4_runner.h, per-sequence state); tests use a fake that
// follows the same contract.
#include <cstdint>
#include <string>
#include <vector>

#include "kv/latent_cache.h"
#include "model/batch.h"
#include "model/expert_cache.h"
#include "util/error.h"

namespace mla {

class GgufFile;

// tokenizer.ggml.eos_token_id, eot_token_id and eom_token_id where the file has them (below
// n_vocab, each once): the tokens that end a sequence.
std::vector<int32_t> gguf_eos_token_ids(const GgufFile& f, int64_t n_vocab);

// Tokens the model sent down each MLA path, cumulative (PathCounters::tokens_*).
struct PathTokens {
  int64_t mha = 0, mqa = 0;
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  virtual int n_vocab() const = 0;
  // Longest sequence the model supports (n_ctx_train), tokens.
  virtual int max_context() const = 0;
  virtual LatentCache& cache() = 0;
  // Copy-on-write of a shared block before a step (the engine's only cache write besides the
  // forward). A multi-process runner repeats it on every rank.
  virtual void copy_block(int32_t src, int32_t dst) { cache().copy_block(src, dst); }
  // A block's rows from the prefix cache's lower tiers (LatentCache::write_block layout), before a
  // step, like copy_block.
  virtual void load_block(int32_t dst, const uint8_t* bytes) { cache().write_block(dst, bytes); }
  // What the cache rows depend on besides the tokens and the cache layout: the model file and the
  // options that change its rows (kv/tier_store.h's fingerprint). 0: unknown (a fake runner).
  virtual uint64_t cache_identity() const { return 0; }

  // The engine's block pool (admission, block tables, preemption): by default the latent cache's
  // blocks. A runner whose model keeps each sequence's cache state itself (paged_cache() false)
  // sizes a pool whose blocks hold no rows and only account that state's memory.
  virtual int32_t kv_blocks() { return cache().n_blocks(); }
  virtual int kv_block_size() { return cache().block_size(); }
  // False: the runner keeps each sequence's state itself, keyed by SeqMeta::seq_id, and a sequence
  // whose step starts at position 0 (context_len == query_len) starts a fresh state. The engine then
  // refuses prefix caching and its tiers (blocks hold nothing to share), gives forked siblings blocks
  // of their own, and calls the two hooks below; other runners ignore them.
  virtual bool paged_cache() const { return true; }
  // The sequence finished, was aborted or was preempted (it recomputes from position 0): its state
  // can go. Unknown ids are ignored.
  virtual void release_sequence(uint64_t /*seq_id*/) {}
  // n > 1: sibling `child` continues from a copy of `parent`'s state (its prompt, computed this step).
  virtual void fork_sequence(uint64_t /*parent*/, uint64_t /*child*/) {}

  // Computes the step: writes the latent row of every batch token at its slot (every layer),
  // attends each sequence over its context rows, and stores the logits of each row in
  // meta.logits_rows into logits[i * n_vocab ...]. The result for a sequence must not depend on
  // the other sequences in the batch (batch invariance).
  virtual void forward(const BatchMeta& meta, float* logits) = 0;

  // Speculative decoding with the model's MTP (nextn) layer. has_mtp: the layer is loaded (its
  // latent rows are the cache's last layer). forward_hidden: forward, plus hidden[t * hidden_dim()]
  // = the final normed state of every batch row. forward_mtp: the MTP layer over meta (its rows
  // are written to the MTP cache layer), h_in / h_out one hidden_dim() row per batch token.
  virtual bool has_mtp() const { return false; }
  virtual int hidden_dim() const { return 0; }
  virtual void forward_hidden(const BatchMeta& meta, float* logits, float* hidden);
  virtual void forward_mtp(const BatchMeta& meta, const float* h_in, float* logits, float* h_out);
  // Most tokens one forward call may carry.
  virtual int64_t max_batch_tokens() const { return INT64_MAX; }

  // DSA: tokens that went through sparse layers (summed over layers) and the context rows their
  // indexer selected, cumulative; 0 for models without sparse attention.
  virtual int64_t sparse_layer_tokens() const { return 0; }
  virtual int64_t sparse_selected_rows() const { return 0; }
  // The routed-expert cache's slots and counters since load (model/expert_cache.h); zeros without one.
  virtual int64_t expert_cache_slots() const { return 0; }
  virtual ExpertCacheCounters expert_cache_counters() const { return {}; }
  // The MLA paths: the model decides each sequence's path from the batch's policy and counts the
  // tokens it sent down each (every forward call's tokens once); the engine reads the counts.
  // auto_prefill_path: where the model's `auto` sends prefill chunks (for the start-up line).
  virtual PathTokens path_tokens() const { return {}; }
  virtual MlaPath auto_prefill_path() const { return MlaPath::Mha; }
  // The policy the weights were loaded for: Mha or Mqa where only that path's W_UK form was
  // derived, Auto where both were. The engine refuses, when it is built, a policy whose paths the
  // weights cannot run (rather than the first step failing in the attention).
  virtual MlaPathPolicy loaded_path_policy() const { return MlaPathPolicy::Auto; }
  // True when a row's bits depend on whether its token was a prompt or a generated one (the model's
  // F32 attention kernels: `auto` sends prompt tokens down the prefill path and generated ones
  // down MQA, and the two differ in the last bits). The engine then keeps blocks holding
  // generated tokens out of the prefix cache, so that a later prompt computes them as a prompt.
  virtual bool rows_depend_on_phase() const { return false; }
};

inline void ModelRunner::forward_hidden(const BatchMeta&, float*, float*) {
  fail("model runner: no MTP layer (speculative decoding needs one)");
}
inline void ModelRunner::forward_mtp(const BatchMeta&, const float*, float*, float*) {
  fail("model runner: no MTP layer (speculative decoding needs one)");
}

}  // namespace mla
