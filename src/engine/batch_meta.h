#pragma once
// Building the model's BatchMeta (model/batch.h) from what the scheduler decided for a step:
// token ids, positions, slot mapping, per-sequence query and context lengths, the context slots
// each sequence's block table expands to, the rows whose logits are needed, and the MLA path policy
// (the model decides each sequence's path from it).
#include <cstdint>
#include <span>

#include "model/batch.h"

namespace mla {

// What the scheduler decided for one sequence in a step.
struct ScheduledSeq {
  std::span<const int32_t> tokens;  // the sequence's tokens so far (prompt + generated)
  std::span<const int32_t> blocks;  // its block table
  int n_computed = 0;               // tokens with KV already in the cache
  int n_new = 0;                    // tokens computed this step: [n_computed, n_computed + n_new)
  bool needs_logits = false;        // of its last new token
  // Speculative verify rows (the last token, then the drafts): every row's logits (the model gives
  // them the MLA path of a 1-token decode).
  bool verify = false;
  // Prompt logprobs: every new row's logits (each predicts the prompt token after it).
  bool prompt_logits = false;
  int n_prompt = -1;    // positions < n_prompt hold prompt tokens (SeqMeta::n_prompt); -1: not said
  uint64_t seq_id = 0;  // SeqMeta::seq_id
};

// Empties meta (keeping its buffers) for a new batch under the given path policy (the MTP
// layer's batches list each sequence's context_slots themselves).
void reset_batch_meta(BatchMeta& meta, MlaPathPolicy policy, int decode_threshold);

// Fills meta (reusing its buffers) for the scheduled sequences, in order. all_logits: every row
// gets logits (tools that dump them), not only the rows that will be sampled.
void build_batch_meta(std::span<const ScheduledSeq> seqs, int block_size, MlaPathPolicy policy, int decode_threshold,
                      bool all_logits, BatchMeta& meta);

}  // namespace mla
