#pragma once
// The bytes of the mapped model file a rank reads, and their pages mapped up front. A single
// process maps the whole file (unless --no-prefault); under mpirun each rank maps only what it computes
// with, so its resident memory is about its shard (docs/SCALING.md): its routed experts, its
// heads' query rows, its rows of attn_output and of the dense and shared FFNs; everything small
// and every rank's (norms, kv_a, router, indexer) whole. The embedding rows are paged in by use;
// the lm_head only on rank 0, which computes the logits.
#include <cstdint>

#include "model/config.h"
#include "model/weights.h"

namespace mla {

struct ShardBytes {
  int64_t sharded = 0;     // this rank's share of the split tensors
  int64_t replicated = 0;  // tensors every rank reads whole (lm_head counted on rank 0 only)
};

// Walks the weights as the forward splits them; with prefault, asks the kernel to map those
// byte ranges now (best effort). Returns their sizes.
ShardBytes map_rank_shard(const DeepseekConfig& c, const DeepseekWeights& w, int rank, int n_ranks, bool prefault);

}  // namespace mla
