#include "kv/block_pool.h"

#include <xxhash.h>

#include <algorithm>
#include <cassert>
#include <cstring>

#include "util/error.h"

namespace mla::kv {

uint64_t hash_block_tokens(uint64_t parent_hash, std::span<const int32_t> tokens) {
  return XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), parent_hash);
}

BlockPool::BlockPool(int32_t n_blocks, int block_size) : block_size_(block_size) {
  if (n_blocks < 1) fail("kv cache: need at least one block, got {}", n_blocks);
  if (block_size < 1) fail("kv cache: block size must be >= 1, got {}", block_size);
  blocks_.resize(n_blocks);
  tokens_.assign(static_cast<size_t>(n_blocks) * block_size, 0);
  for (BlockId b = 0; b < n_blocks; ++b) queue_push_back(b);
}

void BlockPool::queue_push_back(BlockId b) {
  Block& blk = blocks_[b];
  blk.prev = tail_;
  blk.next = kNoBlock;
  if (tail_ != kNoBlock)
    blocks_[tail_].next = b;
  else
    head_ = b;
  tail_ = b;
  ++n_free_;
}

void BlockPool::queue_remove(BlockId b) {
  Block& blk = blocks_[b];
  if (blk.prev != kNoBlock)
    blocks_[blk.prev].next = blk.next;
  else
    head_ = blk.next;
  if (blk.next != kNoBlock)
    blocks_[blk.next].prev = blk.prev;
  else
    tail_ = blk.prev;
  blk.prev = blk.next = kNoBlock;
  --n_free_;
}

BlockId BlockPool::allocate() {
  assert(n_free_ > 0 && head_ != kNoBlock);
  BlockId b = head_;
  queue_remove(b);
  if (blocks_[b].cached) uncache(b);
  blocks_[b].ref_count = 1;
  return b;
}

void BlockPool::touch(BlockId b) {
  Block& blk = blocks_[b];
  if (blk.ref_count == 0) queue_remove(b);
  ++blk.ref_count;
}

void BlockPool::release(BlockId b) {
  Block& blk = blocks_[b];
  assert(blk.ref_count > 0);
  if (--blk.ref_count == 0) queue_push_back(b);
}

BlockId BlockPool::lookup(uint64_t hash, BlockRef parent, std::span<const int32_t> tokens) const {
  assert(static_cast<int>(tokens.size()) == block_size_);
  auto [lo, hi] = by_hash_.equal_range(hash);
  for (auto it = lo; it != hi; ++it) {
    const Block& blk = blocks_[it->second];
    if (blk.parent != parent) continue;
    // The parent itself must still be the block this entry was computed after.
    if (parent.id != kNoBlock && (!blocks_[parent.id].cached || blocks_[parent.id].generation != parent.generation))
      continue;
    const int32_t* t = &tokens_[static_cast<size_t>(it->second) * block_size_];
    if (std::memcmp(t, tokens.data(), tokens.size_bytes()) == 0) return it->second;
  }
  return kNoBlock;
}

void BlockPool::cache(BlockId b, uint64_t hash, BlockRef parent, std::span<const int32_t> tokens) {
  Block& blk = blocks_[b];
  assert(!blk.cached && blk.ref_count > 0);
  assert(static_cast<int>(tokens.size()) == block_size_);
  blk.cached = true;
  blk.hash = hash;
  blk.parent = parent;
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + static_cast<size_t>(b) * block_size_);
  by_hash_.emplace(hash, b);
}

void BlockPool::uncache(BlockId b) {
  Block& blk = blocks_[b];
  if (!blk.cached) return;
  auto [lo, hi] = by_hash_.equal_range(blk.hash);
  for (auto it = lo; it != hi; ++it) {
    if (it->second == b) {
      by_hash_.erase(it);
      break;
    }
  }
  blk.cached = false;
  blk.parent = {};
  ++blk.generation;
}

void BlockPool::check_invariants() const {
  int32_t n_queue = 0;
  std::vector<char> in_queue(blocks_.size(), 0);
  BlockId prev = kNoBlock;
  for (BlockId b = head_; b != kNoBlock; b = blocks_[b].next) {
    if (blocks_[b].prev != prev) fail("kv invariant: free queue link broken at block {}", b);
    if (blocks_[b].ref_count != 0) fail("kv invariant: block {} in free queue with ref {}", b, blocks_[b].ref_count);
    if (in_queue[b]) fail("kv invariant: block {} twice in free queue", b);
    in_queue[b] = 1;
    prev = b;
    ++n_queue;
  }
  if (prev != tail_) fail("kv invariant: free queue tail mismatch");
  if (n_queue != n_free_) fail("kv invariant: free count {} but queue holds {}", n_free_, n_queue);
  size_t n_cached = 0;
  for (BlockId b = 0; b < n_blocks(); ++b) {
    if (blocks_[b].ref_count < 0) fail("kv invariant: block {} ref {}", b, blocks_[b].ref_count);
    if (blocks_[b].ref_count == 0 && !in_queue[b])
      fail("kv invariant: block {} has ref 0 but is not in the free queue", b);
    n_cached += blocks_[b].cached ? 1 : 0;
  }
  if (n_cached != by_hash_.size())
    fail("kv invariant: {} cached blocks but {} hash entries", n_cached, by_hash_.size());
  for (const auto& [h, b] : by_hash_)
    if (!blocks_[b].cached || blocks_[b].hash != h) fail("kv invariant: hash entry for block {} is stale", b);
}

}  // namespace mla::kv
