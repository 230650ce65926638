#pragma once
// The ModelRunner of a DeepSeek-V4 (`deepseek4`) GGUF (model/deepseek4.h). Its cache is not one
// latent row per token: each sequence keeps a Deepseek4Cache (window rows, compressed entries, the
// compressors' carry-over) keyed by the engine's sequence id (SeqMeta::seq_id). A step's sequences
// run together through Deepseek4Model::forward_batch: the weights are read once for all their rows,
// and every row is computed as it would be with its sequence alone (row-independent matmuls and
// MoE, attention per sequence over its own state), so batch invariance holds bit for bit.
//
// Memory: the engine's block pool still decides admission, and its blocks stand for the growing
// part of a state (compressed entries, deepseek4_state_bound): a block of block_size tokens is
// block_size * bytes_per_token bytes. The fixed part (window rows, open windows) is reserved per
// running sequence, max_num_seqs of them. Every live state belongs to a running sequence holding
// its own blocks (forked siblings get copies and blocks of their own; preempted and finished
// sequences' states are freed through the engine's hooks), so the states never take more than
// max_num_seqs * fixed + n_blocks * block_size * bytes_per_token bytes.
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/model_runner.h"
#include "kv/latent_cache.h"  // KvCacheOptions
#include "model/deepseek4.h"
#include "model/deepseek4_weights.h"

namespace mla {

struct Deepseek4RunnerOptions {
  int n_threads = 1;
  int max_num_seqs = 1;  // sequences running at once (EngineConfig::max_num_seqs): states alive
  // block_size, and the capacity as tokens or as bytes for the states together (fixed parts
  // included); dtype is not read (the states are F32).
  KvCacheOptions kv;
  // --verify-paths: each sequence's chunk runs twice from the same state, CSA through the indexer
  // (the result kept) and over every visible entry (Deepseek4Model::set_csa_dense), and their
  // logits are compared at every row wherever no query of the chunk sees more than indexer_top_k
  // entries, where both attend to the same entries (verify_log). verify_beyond_top_k compares the
  // chunks past that too, where the indexer drops entries and the two may differ (tests).
  bool verify_dense = false;
  bool verify_beyond_top_k = false;
};

// What --verify-paths found (Deepseek4RunnerOptions::verify_dense), over the run.
struct Ds4VerifyLog {
  int64_t n_compared = 0;      // sequence chunks compared
  int64_t n_beyond_top_k = 0;  // chunks not compared: a query saw more than top_k entries
  double max_logits_rel = 0;   // the largest over the compared rows of max |s - d| / max |s| (path_rel_diff)
  bool greedy_agree = true;    // each compared row's argmax is the dense run's too (or a near tie)
};

class Deepseek4Runner : public ModelRunner {
 public:
  // Loads path (load_deepseek4, weights repacked for the packed GEMM) and sizes the block pool. Throws mla::Error.
  Deepseek4Runner(const std::string& path, const Deepseek4RunnerOptions& o);
  Deepseek4Runner(std::unique_ptr<Deepseek4Bundle> bundle, const Deepseek4RunnerOptions& o);

  int n_vocab() const override { return static_cast<int>(bundle_->config.n_vocab); }
  int max_context() const override;
  // There is no latent cache: fails (the engine asks kv_blocks / kv_block_size instead).
  LatentCache& cache() override;
  int32_t kv_blocks() override { return n_blocks_; }
  int kv_block_size() override { return block_size_; }
  bool paged_cache() const override { return false; }
  // Blocks hold no rows: nothing to copy (a sibling gets a copy of the state through fork_sequence).
  void copy_block(int32_t, int32_t) override {}
  void load_block(int32_t, const uint8_t*) override;
  void forward(const BatchMeta& meta, float* logits) override;
  void release_sequence(uint64_t seq_id) override { states_.erase(seq_id); }
  void fork_sequence(uint64_t parent, uint64_t child) override;

  const Deepseek4Config& config() const { return bundle_->config; }
  const Deepseek4Bundle& bundle() const { return *bundle_; }  // the weights it runs (mla doctor's too)
  const GgufFile& file() const { return *bundle_->file; }
  // tokenizer.ggml.eos_token_id (and eot, eom) when the file has them.
  std::vector<int32_t> eos_token_ids() const { return gguf_eos_token_ids(*bundle_->file, n_vocab()); }
  // The states alive and the bytes their rows take now (deepseek4_state_bytes), for tests and logs.
  size_t n_states() const { return states_.size(); }
  int64_t state_bytes() const;
  const Ds4StateBound& state_bound() const { return bound_; }
  bool verifies() const { return verify_; }
  const Ds4VerifyLog& verify_log() const { return verify_log_; }
  int64_t block_bytes() const { return block_bytes_; }  // the growing part one block stands for
  // The most bytes the states may take together (see the header comment).
  int64_t memory_bound() const;
  // One line: what a block stands for and the bound ("deepseek4 cache: ...").
  std::string describe_memory() const;

 private:
  void size_pool(const KvCacheOptions& kv);
  Deepseek4Cache& state_for(const SeqMeta& s);
  void forward_verified(uint64_t seq_id, const std::vector<int32_t>& tokens, Deepseek4Cache& state,
                        const std::vector<int32_t>& rows, float* logits);

  std::unique_ptr<Deepseek4Bundle> bundle_;
  std::unique_ptr<Deepseek4Model> model_;
  std::unordered_map<uint64_t, Deepseek4Cache> states_;
  Ds4StateBound bound_;
  int max_num_seqs_ = 1;
  int block_size_ = 16;
  int32_t n_blocks_ = 0;
  int64_t block_bytes_ = 0;  // the growing part one block stands for
  bool verify_ = false, verify_beyond_top_k_ = false;
  Ds4VerifyLog verify_log_;
};

}  // namespace mla
