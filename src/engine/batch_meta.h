#pragma once
// BatchMeta: everything the model sees of one engine step, built once per step by the engine
// (build_batch_meta) and read-only in the forward pass. Sequences are laid out one after another:
// sequence s owns query rows [query_start[s], query_start[s + 1]), which are the positions
// [context_len[s] - query_len(s), context_len[s]) of that sequence.
#include <cstdint>
#include <span>
#include <vector>

#include "engine/engine.h"

namespace mla {

enum class MlaPath : uint8_t { kMha, kMqa };

struct BatchMeta {
  int block_size = 0;
  MlaPathPolicy policy = MlaPathPolicy::kAuto;  // how paths were chosen (for the trace)

  // Per token, [n_tokens]:
  std::vector<int32_t> token_ids;
  std::vector<int32_t> positions;     // position in its sequence
  std::vector<int32_t> slot_mapping;  // cache slot its latent row is written to

  // Per sequence, [n_seqs] (query_start: [n_seqs + 1]):
  std::vector<int32_t> query_start;   // first query row; query_start[n_seqs] == n_tokens
  std::vector<int32_t> context_len;   // rows visible after this step (cached + new)
  std::vector<MlaPath> path;
  std::vector<uint8_t> needs_logits;  // 1: the logits of its last query row are wanted
  // Block tables, [n_seqs][max_blocks], padded with -1: context row j of sequence s is slot
  // block_table[s * max_blocks + j / block_size] * block_size + j % block_size.
  std::vector<int32_t> block_table;
  int max_blocks = 0;

  int n_tokens() const { return static_cast<int>(token_ids.size()); }
  int n_seqs() const { return static_cast<int>(context_len.size()); }
  int query_len(int s) const { return query_start[s + 1] - query_start[s]; }
  // Logit rows: one per sequence with needs_logits, in sequence order.
  int n_logit_rows() const;
  std::span<const int32_t> blocks_of(int s) const {
    return {block_table.data() + static_cast<size_t>(s) * max_blocks,
            static_cast<size_t>(max_blocks)};
  }
  int32_t slot_of(int s, int j) const {
    return blocks_of(s)[j / block_size] * block_size + j % block_size;
  }
  void clear();
};

// What the scheduler decided for one sequence in a step.
struct ScheduledSeq {
  std::span<const int32_t> tokens;   // the sequence's tokens so far (prompt + generated)
  std::span<const int32_t> blocks;   // its block table
  int n_computed = 0;                // tokens with KV already in the cache
  int n_new = 0;                     // tokens computed this step: [n_computed, n_computed + n_new)
  bool needs_logits = false;
};

// The MLA path of a sequence with query length n_q under the policy.
MlaPath choose_path(MlaPathPolicy policy, int n_q, int decode_threshold);

// Fills meta (reusing its buffers) for the scheduled sequences, in order.
void build_batch_meta(std::span<const ScheduledSeq> seqs, int block_size, MlaPathPolicy policy,
                      int decode_threshold, BatchMeta& meta);

}  // namespace mla
