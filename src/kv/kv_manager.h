#pragma once
// Per-sequence block tables over the BlockPool: prefix-cache lookup, slot allocation for the
// tokens a step will compute (with copy-on-write of shared blocks), registration of newly full
// blocks, forks (n > 1 sequences sharing a prompt) and freeing.
//
// A sequence's KV rows for token positions [0, n_computed) live in its block table:
// position p is slot table[p / block_size] * block_size + p % block_size.
// Blocks are immutable while shared (ref_count > 1) or cached: a step that must write into such a
// block first gets a private copy (a BlockCopy the engine applies to the cache before the
// forward) or, when it holds the only reference, drops the block's cache entry.
//
// Lower tiers (kv/tier_store.h, optional): a prefix lookup that runs out of arena blocks goes on in
// the tier store, block by block; the blocks found there get fresh arena blocks (a BlockCopy with
// `load` set: the engine writes their rows before the forward) and enter the arena's prefix cache
// at once. Blocks the arena caches for the first time are listed for the engine to hand down
// (take_new_blocks).
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kv/block_pool.h"
#include "kv/tier_store.h"

namespace mla::kv {

struct SeqBlocks {
  std::vector<BlockId> table;
  // chain[i]: the cached block whose content equals this sequence's full block i (its own block
  // or an identical one entered earlier by another sequence); chain.size() full blocks known to
  // the prefix cache.
  std::vector<BlockRef> chain;
  std::vector<uint64_t> chain_hash;
};

// Copy every layer's rows of block src into block dst, or, with `load` set (src kNoBlock), write
// the rows a lower tier kept for the block into dst.
struct BlockCopy {
  BlockId src = kNoBlock;
  BlockId dst = kNoBlock;
  TierBlockPtr load;
};

struct PrefixHit {
  std::vector<BlockId> blocks;  // cached full blocks matching the prompt's first blocks
  std::vector<uint64_t> hashes;
  std::vector<TierBlockPtr> loads;  // the next blocks of the prompt, found in a lower tier
  std::vector<int8_t> load_tiers;   // per load: 1 (host RAM) or 2 (disk)
  int n_tokens = 0;                 // (blocks.size() + loads.size()) * block_size
};

// A block the arena cached for the first time (cache_full_blocks), for the lower tiers.
struct NewCachedBlock {
  BlockId block = kNoBlock;
  uint64_t hash = 0;
  uint64_t parent_hash = 0;
  std::vector<int32_t> tokens;
};

// What the lower tiers gave to sequences that were admitted: blocks and tokens (prefill saved).
struct TierLoadCounters {
  int64_t blocks[2] = {};  // [0]: from host RAM, [1]: from disk
  int64_t tokens = 0;      // positions of loaded blocks the sequences did not recompute
};

class KvManager {
 public:
  KvManager(int32_t n_blocks, int block_size, bool enable_prefix_caching);

  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }
  int block_size() const { return pool_.block_size(); }
  bool prefix_caching() const { return prefix_caching_; }

  // The lower tiers under the arena's prefix cache (nullptr: none). Not owned.
  void set_tiers(TierStore* tiers) { tiers_ = tiers; }
  TierStore* tiers() const { return tiers_; }

  // The longest run of cached full blocks matching tokens (empty when prefix caching is off): the
  // arena's, then the lower tiers'.
  PrefixHit find_prefix(std::span<const int32_t> tokens) const;
  // For a request that will wait for its turn: the disk tier reads the blocks of tokens past the
  // arena's run in the background (TierStore::prefetch), so that its lookup finds them read.
  void prefetch_prefix(std::span<const int32_t> tokens) const;

  // Makes seq able to hold KV for positions [0, n_computed + n_new): takes the hit's blocks
  // (when given: seq must be empty and n_computed <= hit->n_tokens), then allocates, with
  // copy-on-write of the block holding position n_computed if it is shared. Appends the copies
  // to `copies`. All or nothing: returns false and changes nothing when free blocks run short.
  bool allocate(SeqBlocks& seq, int n_computed, int n_new, const PrefixHit* hit, std::vector<BlockCopy>& copies);

  // After a step: enters seq's full blocks among positions [0, n_computed) in the prefix cache.
  void cache_full_blocks(SeqBlocks& seq, std::span<const int32_t> tokens, int n_computed);
  // The blocks cache_full_blocks entered for the first time since the last call, which no lower
  // tier holds yet (always empty without tiers). Their rows stay until the step's end.
  std::vector<NewCachedBlock> take_new_blocks() { return std::move(new_blocks_); }
  const TierLoadCounters& tier_loads() const { return tier_loads_; }

  // dst shares every block of src (dst must be empty).
  void fork(const SeqBlocks& src, SeqBlocks& dst);

  // Releases the blocks past those holding positions [0, n_positions) (last block first): blocks
  // a step allocated ahead (speculative decoding) before the sequence shares its table.
  void truncate(SeqBlocks& seq, int n_positions);

  // Releases seq's blocks, last block first (so the tail of a prompt is evicted before its head).
  void free(SeqBlocks& seq);

 private:
  BlockPool pool_;
  bool prefix_caching_;
  TierStore* tiers_ = nullptr;
  // The blocks the last lookup found in the tiers, by hash: a sequence that waits for free blocks
  // looks its prompt up again at each step, which then reads no tier again. Cleared when a hit
  // with loads is taken.
  mutable std::unordered_map<uint64_t, std::pair<TierBlockPtr, int>> last_loads_;
  std::vector<NewCachedBlock> new_blocks_;
  TierLoadCounters tier_loads_;
};

}  // namespace mla::kv
