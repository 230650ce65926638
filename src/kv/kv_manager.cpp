#include "kv/kv_manager.h"

#include <algorithm>
#include <cassert>

#include "util/trace.h"

namespace mla::kv {

KvManager::KvManager(int32_t n_blocks, int block_size, bool enable_prefix_caching)
    : pool_(n_blocks, block_size), prefix_caching_(enable_prefix_caching) {}

PrefixHit KvManager::find_prefix(std::span<const int32_t> tokens) const {
  PrefixHit hit;
  if (!prefix_caching_) return hit;
  const int bs = block_size();
  const size_t n_full = tokens.size() / bs;
  BlockRef parent;
  uint64_t parent_hash = kRootHash;
  size_t i = 0;
  for (; i < n_full; ++i) {
    auto toks = tokens.subspan(i * bs, bs);
    uint64_t h = hash_block_tokens(parent_hash, toks);
    BlockId b = pool_.lookup(h, parent, toks);
    if (b == kNoBlock) break;
    hit.blocks.push_back(b);
    hit.hashes.push_back(h);
    parent = pool_.ref_of(b);
    parent_hash = h;
  }
  // The arena's run ended: the lower tiers may hold the blocks after it.
  std::unordered_map<uint64_t, std::pair<TierBlockPtr, int>> found;
  int n_reused = 0;
  for (; tiers_ && i < n_full; ++i) {
    auto toks = tokens.subspan(i * bs, bs);
    uint64_t h = hash_block_tokens(parent_hash, toks);
    TierBlockPtr b;
    int tier = 0;
    if (auto it = last_loads_.find(h);
        it != last_loads_.end() && it->second.first->parent_hash == parent_hash &&
        std::equal(toks.begin(), toks.end(), it->second.first->tokens.begin(), it->second.first->tokens.end())) {
      b = it->second.first;
      tier = it->second.second;
      ++n_reused;
    } else {
      b = tiers_->fetch(h, parent_hash, toks, &tier);
    }
    if (!b) break;
    found.emplace(h, std::make_pair(b, tier));
    hit.loads.push_back(std::move(b));
    hit.load_tiers.push_back(static_cast<int8_t>(tier));
    parent_hash = h;
  }
  if (tiers_) {
    last_loads_ = std::move(found);
    if (hit.blocks.size() < n_full && trace_tiers_limit() > 0) {
      const auto n_host = static_cast<int>(std::count(hit.load_tiers.begin(), hit.load_tiers.end(), int8_t{1}));
      trace_tiers(static_cast<int>(n_full), static_cast<int>(hit.blocks.size()), n_host,
                  static_cast<int>(hit.loads.size()) - n_host, n_reused);
    }
  }
  hit.n_tokens = static_cast<int>(hit.blocks.size() + hit.loads.size()) * bs;
  return hit;
}

void KvManager::prefetch_prefix(std::span<const int32_t> tokens) const {
  if (!prefix_caching_ || !tiers_ || !tiers_->has_disk()) return;
  const int bs = block_size();
  const size_t n_full = tokens.size() / bs;
  BlockRef parent;
  uint64_t parent_hash = kRootHash;
  std::vector<TierStore::ChainBlock> chain;
  for (size_t i = 0; i < n_full; ++i) {
    auto toks = tokens.subspan(i * bs, bs);
    const uint64_t h = hash_block_tokens(parent_hash, toks);
    if (chain.empty()) {
      if (BlockId b = pool_.lookup(h, parent, toks); b != kNoBlock) {
        parent = pool_.ref_of(b);
        parent_hash = h;
        continue;
      }
    }
    chain.push_back({h, parent_hash, {toks.begin(), toks.end()}});
    parent_hash = h;
  }
  tiers_->prefetch(std::move(chain));
}

bool KvManager::allocate(SeqBlocks& seq, int n_computed, int n_new, const PrefixHit* hit,
                         std::vector<BlockCopy>& copies) {
  const int bs = block_size();
  const int n_total = n_computed + n_new;
  const size_t n_blocks_total = (static_cast<size_t>(n_total) + bs - 1) / bs;
  // Hit blocks holding positions < n_computed; a block the step rewrites entirely is not taken.
  const size_t n_hit_used = hit ? (static_cast<size_t>(n_computed) + bs - 1) / bs : 0;
  // The hit's arena blocks come first; the rest of the blocks it uses are loaded from a lower tier.
  const size_t n_arena = hit ? hit->blocks.size() : 0;
  assert(!hit || (seq.table.empty() && n_hit_used <= hit->blocks.size() + hit->loads.size()));

  // Plan: how many blocks leave the free queue.
  const size_t n_table = hit ? n_hit_used : seq.table.size();
  int32_t n_needed = 0;
  for (size_t i = 0; i < n_hit_used; ++i) n_needed += i >= n_arena || pool_.ref_count(hit->blocks[i]) == 0;
  if (n_blocks_total > n_table) n_needed += static_cast<int32_t>(n_blocks_total - n_table);
  const size_t write_idx = static_cast<size_t>(n_computed) / bs;
  const bool writes_existing = n_new > 0 && write_idx < n_table;
  if (writes_existing && !(hit && write_idx >= n_arena)) {  // a loaded block is the sequence's own
    BlockId b = hit ? hit->blocks[write_idx] : seq.table[write_idx];
    int refs_after = pool_.ref_count(b) + (hit ? 1 : 0);
    if (refs_after > 1) ++n_needed;  // copy-on-write
  }
  if (n_needed > pool_.n_free()) return false;

  // Commit. Hit blocks first, so allocate() below cannot evict them.
  for (size_t i = 0; i < std::min(n_hit_used, n_arena); ++i) {
    BlockId b = hit->blocks[i];
    pool_.touch(b);
    seq.table.push_back(b);
    seq.chain.push_back(pool_.ref_of(b));
    seq.chain_hash.push_back(hit->hashes[i]);
  }
  // Loaded blocks: a fresh arena block each, written before the forward and cached from now on
  // (the lookup that found them in a lower tier found no arena block under the same parent).
  for (size_t i = n_arena; i < n_hit_used; ++i) {
    const TierBlockPtr& tb = hit->loads[i - n_arena];
    BlockId b = pool_.allocate();
    copies.push_back({kNoBlock, b, tb});
    pool_.cache(b, tb->hash, i ? seq.chain[i - 1] : BlockRef{}, tb->tokens);
    seq.table.push_back(b);
    seq.chain.push_back(pool_.ref_of(b));
    seq.chain_hash.push_back(tb->hash);
    ++tier_loads_.blocks[hit->load_tiers[i - n_arena] == 1 ? 0 : 1];
    tier_loads_.tokens += std::min<int64_t>(bs, n_computed - static_cast<int64_t>(i) * bs);
  }
  if (hit && !hit->loads.empty()) last_loads_.clear();
  if (writes_existing) {
    BlockId b = seq.table[write_idx];
    if (pool_.ref_count(b) > 1) {
      BlockId dst = pool_.allocate();
      copies.push_back({b, dst, nullptr});
      pool_.release(b);
      seq.table[write_idx] = dst;
    } else {
      pool_.uncache(b);
    }
    if (seq.chain.size() > write_idx) {
      seq.chain.resize(write_idx);
      seq.chain_hash.resize(write_idx);
    }
  }
  while (seq.table.size() < n_blocks_total) seq.table.push_back(pool_.allocate());
  return true;
}

void KvManager::cache_full_blocks(SeqBlocks& seq, std::span<const int32_t> tokens, int n_computed) {
  if (!prefix_caching_) return;
  const int bs = block_size();
  const size_t n_full = static_cast<size_t>(n_computed) / bs;
  assert(n_full <= seq.table.size() && static_cast<size_t>(n_computed) <= tokens.size());
  for (size_t i = seq.chain.size(); i < n_full; ++i) {
    BlockRef parent = i ? seq.chain[i - 1] : BlockRef{};
    uint64_t parent_hash = i ? seq.chain_hash[i - 1] : kRootHash;
    auto toks = tokens.subspan(i * bs, bs);
    uint64_t h = hash_block_tokens(parent_hash, toks);
    BlockId own = seq.table[i];
    BlockId existing = pool_.lookup(h, parent, toks);
    if (existing == kNoBlock) {
      // A block already entered under another parent cannot stand for this prefix; leave the
      // rest of this sequence uncached rather than break the chain's guarantee.
      if (pool_.is_cached(own)) return;
      pool_.cache(own, h, parent, toks);
      existing = own;
      if (tiers_ && !tiers_->contains(h)) new_blocks_.push_back({own, h, parent_hash, {toks.begin(), toks.end()}});
    }
    seq.chain.push_back(pool_.ref_of(existing));
    seq.chain_hash.push_back(h);
  }
}

void KvManager::fork(const SeqBlocks& src, SeqBlocks& dst) {
  assert(dst.table.empty());
  for (BlockId b : src.table) pool_.touch(b);
  dst = src;
}

void KvManager::truncate(SeqBlocks& seq, int n_positions) {
  const size_t keep = (static_cast<size_t>(n_positions) + block_size() - 1) / block_size();
  while (seq.table.size() > keep) {
    pool_.release(seq.table.back());
    seq.table.pop_back();
  }
  if (seq.chain.size() > keep) {
    seq.chain.resize(keep);
    seq.chain_hash.resize(keep);
  }
}

void KvManager::free(SeqBlocks& seq) {
  for (size_t i = seq.table.size(); i-- > 0;) pool_.release(seq.table[i]);
  seq.table.clear();
  seq.chain.clear();
  seq.chain_hash.clear();
}

}  // namespace mla::kv
