#pragma once
// The KV block pool: ref-counted fixed-size blocks of latent-cache slots, a free queue with O(1)
// removal, and the prefix cache (full blocks found by a chained hash of their token ids).
//
// A block holds block_size consecutive token positions of one sequence; slot = block *
// block_size + offset addresses one latent row in every layer's arena (kv/latent_cache.h).
//
// Free queue: blocks with ref_count 0, least recently freed first. allocate() takes the head; a
// block freed keeps its prefix-cache entry until it is taken (LRU eviction), so a later request
// with the same prefix can revive it (touch() removes it from the middle of the queue in O(1)).
//
// Prefix cache: a full block is entered under hash(parent hash, its block_size token ids). A
// lookup must also match the token ids and the parent block's identity (id and generation: a
// block's generation changes whenever its cache entry is dropped), so by induction over the chain
// a hit means the whole token prefix is equal — a hash collision can never return wrong KV.
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace mla::kv {

using BlockId = int32_t;
inline constexpr BlockId kNoBlock = -1;

// Chained block hash (XXH3-64 of the block's token ids, seeded with the parent's hash; the first
// block's parent hash is kRootHash).
inline constexpr uint64_t kRootHash = 0x6d6c612e63707021ull;
uint64_t hash_block_tokens(uint64_t parent_hash, std::span<const int32_t> tokens);

// The identity of a cached block, valid while its generation is unchanged.
struct BlockRef {
  BlockId id = kNoBlock;
  uint32_t generation = 0;
  bool operator==(const BlockRef&) const = default;
};

class BlockPool {
 public:
  BlockPool(int32_t n_blocks, int block_size);

  int32_t n_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  int block_size() const { return block_size_; }
  // Blocks with ref_count 0 (including freed blocks that are still in the prefix cache).
  int32_t n_free() const { return n_free_; }
  int32_t n_cached() const { return static_cast<int32_t>(by_hash_.size()); }

  // Takes the least recently freed block (dropping its cache entry); ref_count becomes 1.
  // Precondition: n_free() > 0.
  BlockId allocate();
  // ref_count += 1; a free block leaves the free queue.
  void touch(BlockId b);
  // ref_count -= 1; at 0 the block joins the tail of the free queue. Precondition: ref_count > 0.
  void release(BlockId b);
  int ref_count(BlockId b) const { return blocks_[b].ref_count; }

  // The cached full block for (hash, parent, tokens), or kNoBlock. parent.id == kNoBlock for
  // the first block of a sequence.
  BlockId lookup(uint64_t hash, BlockRef parent, std::span<const int32_t> tokens) const;
  // Enters block b (held, full: tokens.size() == block_size) in the prefix cache. Precondition:
  // b is not cached and lookup(hash, parent, tokens) == kNoBlock.
  void cache(BlockId b, uint64_t hash, BlockRef parent, std::span<const int32_t> tokens);
  // Drops b's cache entry (before its rows are overwritten); its generation changes.
  void uncache(BlockId b);
  bool is_cached(BlockId b) const { return blocks_[b].cached; }
  BlockRef ref_of(BlockId b) const { return {b, blocks_[b].generation}; }
  uint64_t hash_of(BlockId b) const { return blocks_[b].hash; }

  // Asserts the pool's invariants (free queue = blocks with ref 0, counts, cache map).
  void check_invariants() const;

 private:
  struct Block {
    int32_t ref_count = 0;
    BlockId prev = kNoBlock;  // free-queue links, valid while ref_count == 0
    BlockId next = kNoBlock;
    bool cached = false;
    uint32_t generation = 0;
    uint64_t hash = 0;
    BlockRef parent;
  };
  void queue_push_back(BlockId b);
  void queue_remove(BlockId b);

  int block_size_;
  std::vector<Block> blocks_;
  std::vector<int32_t> tokens_;  // [n_blocks][block_size]: token ids of cached blocks
  BlockId head_ = kNoBlock, tail_ = kNoBlock;
  int32_t n_free_ = 0;
  std::unordered_multimap<uint64_t, BlockId> by_hash_;
};

}  // namespace mla::kv
