#pragma once
// What rank 0 sends the workers each engine step: the step's BatchMeta (rank 0's slot lists
// included, so the workers' caches mirror rank 0's layout without a scheduler of
// their own) and the copy-on-write block copies to apply before it. Two broadcasts: a fixed
// header, then the int32 payload; a third with the rows of blocks loaded from the prefix cache's
// lower tiers when the step has any.
#include <cstdint>
#include <utility>
#include <vector>

#include "model/batch.h"

namespace mla {

// Forward: one engine step. Stats: every rank's RankStats gathered (mla bench). Stop: workers return.
enum class StepCommand : int32_t { Forward = 1, Stop = 2, Stats = 3 };

struct StepHeader {
  int32_t command = 0;  // StepCommand
  int32_t n_tokens = 0, n_seqs = 0, n_context_slots = 0, n_logits_rows = 0;
  int32_t policy = 0, decode_threshold = 1, n_copies = 0;
  int32_t payload_ints = 0;  // int32 values in the payload that follows
};

// (src, dst) block pairs, in the order they apply. src < 0: a block loaded from the prefix cache's
// lower tiers on rank 0 (kv/tier_store.h) — the (-1 - src)-th block of the step's load bytes, which
// rank 0 broadcasts after the payload (load_index), each LatentCache::block_bytes() long.
using BlockCopies = std::vector<std::pair<int32_t, int32_t>>;
inline int32_t load_index(int32_t src) { return -1 - src; }
inline int32_t n_loads(const BlockCopies& copies) {
  int32_t n = 0;
  for (const auto& c : copies) n += c.first < 0;
  return n;
}

// The header and payload of a Forward step.
StepHeader encode_step(const BatchMeta& meta, const BlockCopies& copies, std::vector<int32_t>& payload);
// The inverse. Throws mla::Error when the payload does not match the header.
void decode_step(const StepHeader& h, const std::vector<int32_t>& payload, BatchMeta& meta, BlockCopies& copies);

}  // namespace mla
