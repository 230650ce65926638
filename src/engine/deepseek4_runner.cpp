#include "engine/deepseek4_runner.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "gguf/gguf.h"
#include "model/path_verify.h"
#include "util/error.h"
#include "util/log.h"

namespace mla {

Deepseek4Runner::Deepseek4Runner(const std::string& path, const Deepseek4RunnerOptions& o)
    : Deepseek4Runner(load_deepseek4(path, /*repack=*/true), o) {}

Deepseek4Runner::Deepseek4Runner(std::unique_ptr<Deepseek4Bundle> bundle, const Deepseek4RunnerOptions& o)
    : bundle_(std::move(bundle)),
      max_num_seqs_(o.max_num_seqs),
      verify_(o.verify_dense && bundle_->config.has_csa()),
      verify_beyond_top_k_(o.verify_beyond_top_k) {
  if (o.max_num_seqs < 1) fail("deepseek4: max-num-seqs must be >= 1, got {}", o.max_num_seqs);
  model_ = std::make_unique<Deepseek4Model>(bundle_->config, bundle_->weights, o.n_threads);
  bound_ = deepseek4_state_bound(bundle_->config);
  size_pool(o.kv);
  log().info("{}", describe_memory());
}

// Blocks from --kv-cache-tokens (rounded up), or from --kv-cache-memory less the fixed parts of
// max_num_seqs states (rounded down), or the default token count.
void Deepseek4Runner::size_pool(const KvCacheOptions& kv) {
  if (kv.block_size < 1) fail("kv cache: block size must be >= 1, got {}", kv.block_size);
  block_size_ = kv.block_size;
  // At least one byte: a sliding-only model's states do not grow, but the pool still bounds tokens.
  block_bytes_ = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(bound_.bytes_per_token * block_size_)));
  int64_t n_blocks = 0;
  if (kv.tokens > 0 || kv.memory_bytes <= 0) {
    const int64_t tokens = kv.tokens > 0 ? kv.tokens : KvCacheOptions::kDefaultTokens;
    n_blocks = (tokens + block_size_ - 1) / block_size_;
  } else {
    const int64_t fixed = bound_.fixed_bytes * max_num_seqs_;
    n_blocks = (kv.memory_bytes - fixed) / block_bytes_;
    if (n_blocks < 1)
      fail(
          "kv cache: {} bytes of memory is less than the deepseek4 states need: {} bytes fixed per running sequence "
          "x max-num-seqs {} = {} bytes, plus {} bytes per block of {} tokens",
          kv.memory_bytes, bound_.fixed_bytes, max_num_seqs_, fixed, block_bytes_, block_size_);
  }
  if (n_blocks > INT32_MAX / block_size_)
    fail("kv cache: {} blocks of {} tokens is more than the {} slots a cache can address", n_blocks, block_size_,
         INT32_MAX);
  n_blocks_ = static_cast<int32_t>(n_blocks);
}

int Deepseek4Runner::max_context() const {
  const int64_t n = bundle_->config.n_ctx_train;
  return n > 0 ? static_cast<int>(std::min<int64_t>(n, INT_MAX)) : INT_MAX;
}

LatentCache& Deepseek4Runner::cache() {
  fail("deepseek4: the model keeps a cache state per sequence, not a latent cache");
}

void Deepseek4Runner::load_block(int32_t, const uint8_t*) {
  fail("deepseek4: the kv cache tiers are not supported (the cache state is per sequence, not per-token blocks)");
}

int64_t Deepseek4Runner::memory_bound() const {
  return bound_.fixed_bytes * max_num_seqs_ + int64_t{n_blocks_} * block_bytes_;
}

int64_t Deepseek4Runner::state_bytes() const {
  int64_t n = 0;
  for (const auto& [id, st] : states_) n += deepseek4_state_bytes(st);
  return n;
}

std::string Deepseek4Runner::describe_memory() const {
  constexpr double kMiB = 1024.0 * 1024.0;
  return fmt::format(
      "deepseek4 cache: a state per sequence (F32): {:.2f} MiB fixed (window rows, open compressor windows) x "
      "max-num-seqs {}, plus the compressed entries: a block of {} tokens stands for {} bytes of them; {} blocks = {} "
      "tokens; at most {:.2f} MiB",
      static_cast<double>(bound_.fixed_bytes) / kMiB, max_num_seqs_, block_size_, block_bytes_, n_blocks_,
      int64_t{n_blocks_} * block_size_, static_cast<double>(memory_bound()) / kMiB);
}

void Deepseek4Runner::fork_sequence(uint64_t parent, uint64_t child) {
  auto it = states_.find(parent);
  if (it == states_.end()) fail("deepseek4 runner: fork of sequence {}, which has no state", parent);
  states_[child] = it->second;
}

// A step starting at position 0 starts a fresh state (a new sequence, or a preempted one computing
// again); any other must continue its state exactly where the last step left it.
Deepseek4Cache& Deepseek4Runner::state_for(const SeqMeta& s) {
  const int64_t n_past = s.context_len - s.query_len;
  if (n_past == 0) return states_[s.seq_id] = model_->make_cache();
  auto it = states_.find(s.seq_id);
  if (it == states_.end())
    fail("deepseek4 runner: sequence {} continues at position {} but has no state", s.seq_id, n_past);
  if (it->second.n_past != n_past)
    fail("deepseek4 runner: sequence {} continues at position {} but its state holds {} tokens", s.seq_id, n_past,
         it->second.n_past);
  return it->second;
}

// All the step's sequences in one forward_batch (the matmuls and the MoE over every row at once,
// attention per sequence over its own state); a sequence's rows of meta.logits_rows (ascending,
// grouped by sequence) are the chunk-relative rows its logits are returned for. Under
// --verify-paths each sequence runs alone, twice (forward_verified): the same bits, since a row's
// result does not depend on the rest of the batch.
void Deepseek4Runner::forward(const BatchMeta& meta, float* logits) {
  const auto V = static_cast<size_t>(n_vocab());
  std::vector<Deepseek4Model::Seq> seqs;
  std::vector<std::vector<int32_t>> rows(meta.seqs.size());
  size_t k = 0;
  for (size_t i = 0; i < meta.seqs.size(); ++i) {
    const SeqMeta& s = meta.seqs[i];
    const size_t k0 = k;
    for (; k < meta.logits_rows.size() && meta.logits_rows[k] < s.query_start + s.query_len; ++k)
      rows[i].push_back(meta.logits_rows[k] - s.query_start);
    const auto tokens = std::span<const int32_t>(meta.token_ids)
                            .subspan(static_cast<size_t>(s.query_start), static_cast<size_t>(s.query_len));
    if (verify_)
      forward_verified(s.seq_id, std::vector<int32_t>(tokens.begin(), tokens.end()), state_for(s), rows[i],
                       logits + k0 * V);
    else
      seqs.push_back({tokens, &state_for(s), rows[i]});
  }
  if (!verify_) model_->forward_batch(seqs, meta.logits_rows.empty() ? nullptr : logits);
}

// The chunk through the indexer (kept: state and the wanted rows) and, from a copy of the state
// before it, dense; every row's logits compared. A row's logits are the same bits whichever rows
// are asked for (Deepseek4Model::forward), so the kept ones are what forward() alone gives.
void Deepseek4Runner::forward_verified(uint64_t seq_id, const std::vector<int32_t>& tokens, Deepseek4Cache& state,
                                       const std::vector<int32_t>& rows, float* logits) {
  const Deepseek4Config& c = bundle_->config;
  const auto V = static_cast<size_t>(n_vocab());
  const int64_t pos0 = state.n_past, n_tok = static_cast<int64_t>(tokens.size());
  if ((pos0 + n_tok) / kDs4CsaRatio > c.indexer_top_k && !verify_beyond_top_k_) {
    ++verify_log_.n_beyond_top_k;
    model_->forward(tokens, state, rows.empty() ? nullptr : logits, rows);
    return;
  }
  Deepseek4Cache other = state;
  std::vector<float> sparse(static_cast<size_t>(n_tok) * V), dense(sparse.size());
  model_->forward(tokens, state, sparse.data());
  model_->set_csa_dense(true);
  model_->forward(tokens, other, dense.data());
  model_->set_csa_dense(false);
  for (size_t i = 0; i < rows.size(); ++i)
    std::copy_n(sparse.begin() + static_cast<size_t>(rows[i]) * V, V, logits + i * V);
  double rel = 0;
  bool greedy = true;
  for (int64_t t = 0; t < n_tok; ++t) {
    rel = std::max(rel, path_rel_diff(sparse.data() + t * V, dense.data() + t * V, static_cast<int64_t>(V)));
    greedy = greedy && path_greedy_agrees(sparse.data() + t * V, dense.data() + t * V, static_cast<int64_t>(V));
  }
  ++verify_log_.n_compared;
  verify_log_.max_logits_rel = std::max(verify_log_.max_logits_rel, rel);
  verify_log_.greedy_agree = verify_log_.greedy_agree && greedy;
  log().info("verify-paths seq={} pos0={} tokens={} (CSA rerun over every entry) logits_rel={:.3e} greedy={}", seq_id,
             pos0, n_tok, rel, greedy ? "same" : "DIFFER");
}

}  // namespace mla
