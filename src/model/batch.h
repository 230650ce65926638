#pragma once
// The batch description the forward pass consumes. Built once per step by the caller (the
// engine, `mla run`, tests); layers read only this, never a request object.
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "kernels/path_cost.h"  // MlaPath

namespace mla {

// The policy a step runs under. The model alone turns it into a path per sequence and layer
// (Deepseek2Model::mla_path): mha / mqa force that path everywhere; auto sends a query length
// <= BatchMeta::decode_threshold down MQA (decode), longer ones down the cheaper prefill path for
// the model's widths, and in a sparse (DSA) layer weighs both paths' cost for the selection.
enum class MlaPathPolicy : uint8_t { Auto, Mha, Mqa };

std::string_view mla_path_policy_name(MlaPathPolicy p);  // "auto" | "mha" | "mqa"
std::string_view mla_path_name(MlaPath p);               // "mha" | "mqa"
// Throws mla::Error for anything but auto|mha|mqa.
MlaPathPolicy parse_mla_path_policy(std::string_view s);

struct SeqMeta {
  int32_t query_start = 0;  // first of this sequence's tokens in the batch arrays
  int32_t query_len = 0;    // its tokens in this step: positions context_len - query_len .. context_len - 1
  int32_t context_len = 0;  // tokens in its cache after this step, including this step's
  int32_t slots_start = 0;  // where its context slot list starts in BatchMeta::context_slots
  // Speculative decoding: the rows verify MTP drafts (the last accepted token, then the drafts).
  // The model sends them down the path a 1-token decode would take, so that their bits are the
  // decode's.
  bool verify = false;
  // Positions < n_prompt hold the request's prompt, later ones tokens it generated; -1: not said
  // (tools that run the model without an engine). With the F32 attention kernels, `auto` sends
  // prompt tokens down the prefill path and generated ones down MQA whatever the chunking, so a
  // row's bits depend on its token's phase only (Deepseek2Model::plan_attention_calls).
  int32_t n_prompt = -1;
  // The engine's identity of the sequence (Sequence::id), unique for the engine's life; 0 where no
  // engine said (tools running one sequence). Runners that keep per-sequence state key it by this.
  uint64_t seq_id = 0;
};

struct BatchMeta {
  std::vector<int32_t> token_ids;     // [n_tokens]
  std::vector<int32_t> positions;     // [n_tokens] RoPE position of each token
  std::vector<int32_t> slot_mapping;  // [n_tokens] latent cache slot each token's row is written to
  std::vector<SeqMeta> seqs;          // sequences, their tokens contiguous in the arrays above
  // Per sequence, context_len slots: the slot of context position j (with a paged cache, the
  // sequence's block table expanded: block_table[j / block_size] * block_size + j % block_size).
  std::vector<int32_t> context_slots;
  std::vector<int32_t> logits_rows;  // batch rows whose logits are wanted, ascending
  // What the model decides each sequence's MLA path from (no path is chosen before the model).
  MlaPathPolicy policy = MlaPathPolicy::Auto;
  int32_t decode_threshold = 1;  // auto: a query length <= this goes down MQA (speculative verify rows count as 1)

  int64_t n_tokens() const { return static_cast<int64_t>(token_ids.size()); }
};

// One sequence whose cache holds `n_past` earlier tokens in slots 0..n_past-1 (slot = position),
// extended by `tokens`. Logits for every new token when all_logits, else for the last one. The
// policy is the batch's; the model picks the path from it, as for an engine step.
BatchMeta single_sequence_batch(const std::vector<int32_t>& tokens, int32_t n_past, bool all_logits,
                                MlaPathPolicy policy);

// Appends one sequence's chunk to b, as an engine step carries it to a runner that keeps its own
// state per sequence (deepseek4): `tokens` at positions n_past.. of sequence seq_id, the logits of
// every new row wanted. Sets the token ids, the SeqMeta's query range, context length and id, and
// the logits rows; no cache slots.
void append_sequence_chunk(BatchMeta& b, uint64_t seq_id, std::span<const int32_t> tokens, int32_t n_past);

}  // namespace mla
