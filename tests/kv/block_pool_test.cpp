// Block pool, prefix cache and per-sequence block tables (no model needed).
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "kv/kv_manager.h"

namespace mla::kv {
namespace {

std::vector<int32_t> iota_tokens(int n, int start = 100) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

TEST(BlockPool, AllocatesInFreeOrderAndReturnsFreedBlocksToTheTail) {
  BlockPool pool(4, 16);
  EXPECT_EQ(pool.n_free(), 4);
  EXPECT_EQ(pool.allocate(), 0);
  EXPECT_EQ(pool.allocate(), 1);
  pool.release(0);  // tail: 2 3 0
  EXPECT_EQ(pool.allocate(), 2);
  EXPECT_EQ(pool.allocate(), 3);
  EXPECT_EQ(pool.allocate(), 0);
  EXPECT_EQ(pool.n_free(), 0);
  pool.check_invariants();
}

TEST(BlockPool, TouchRemovesAFreeBlockFromTheMiddleOfTheQueue) {
  BlockPool pool(5, 4);
  std::vector<BlockId> b;
  for (int i = 0; i < 5; ++i) b.push_back(pool.allocate());
  for (BlockId x : b) pool.release(x);  // queue 0 1 2 3 4
  pool.touch(2);
  EXPECT_EQ(pool.ref_count(2), 1);
  EXPECT_EQ(pool.n_free(), 4);
  pool.check_invariants();
  EXPECT_EQ(pool.allocate(), 0);
  EXPECT_EQ(pool.allocate(), 1);
  EXPECT_EQ(pool.allocate(), 3);
  EXPECT_EQ(pool.allocate(), 4);
  pool.touch(2);
  EXPECT_EQ(pool.ref_count(2), 2);
  pool.release(2);
  pool.release(2);
  EXPECT_EQ(pool.n_free(), 1);
  pool.check_invariants();
}

TEST(BlockPool, LookupChecksTokensAndParentNotJustTheHash) {
  BlockPool pool(4, 4);
  std::vector<int32_t> a = {1, 2, 3, 4}, b = {1, 2, 3, 5};
  BlockId x = pool.allocate();
  const uint64_t h = hash_block_tokens(kRootHash, a);
  pool.cache(x, h, {}, a);
  EXPECT_EQ(pool.lookup(h, {}, a), x);
  // Same hash, other tokens (a collision as far as the map is concerned): never a hit.
  EXPECT_EQ(pool.lookup(h, {}, b), kNoBlock);
  // Same tokens under another parent: not a hit either.
  BlockId y = pool.allocate();
  EXPECT_EQ(pool.lookup(h, pool.ref_of(y), a), kNoBlock);
  pool.check_invariants();
}

TEST(BlockPool, ChildOfAnEvictedParentIsNoLongerFound) {
  BlockPool pool(3, 2);
  std::vector<int32_t> t0 = {1, 2}, t1 = {3, 4};
  BlockId p = pool.allocate(), c = pool.allocate();
  uint64_t h0 = hash_block_tokens(kRootHash, t0), h1 = hash_block_tokens(h0, t1);
  pool.cache(p, h0, {}, t0);
  const BlockRef parent = pool.ref_of(p);
  pool.cache(c, h1, parent, t1);
  EXPECT_EQ(pool.lookup(h1, parent, t1), c);
  pool.release(p);  // queue: 2 p
  pool.release(c);  // queue: 2 p c
  EXPECT_EQ(pool.allocate(), 2);
  EXPECT_EQ(pool.allocate(), p);  // p's entry is evicted; c is still cached
  EXPECT_TRUE(pool.is_cached(c));
  EXPECT_EQ(pool.lookup(h1, parent, t1), kNoBlock);
  // p gets the same content again: a new generation, so c (computed after the old p) stays
  // unreachable through it.
  pool.cache(p, h0, {}, t0);
  EXPECT_EQ(pool.lookup(h0, {}, t0), p);
  EXPECT_NE(pool.ref_of(p), parent);
  EXPECT_EQ(pool.lookup(h1, pool.ref_of(p), t1), kNoBlock);
  EXPECT_EQ(pool.lookup(h1, parent, t1), kNoBlock);
  pool.check_invariants();
}

TEST(KvManager, PrefixHitSharesBlocksAndRecomputesTheLastToken) {
  KvManager kv(16, 4, true);
  auto prompt = iota_tokens(10);
  SeqBlocks a;
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.allocate(a, 0, 10, nullptr, copies));
  EXPECT_EQ(a.table.size(), 3u);
  kv.cache_full_blocks(a, prompt, 10);
  EXPECT_EQ(a.chain.size(), 2u);
  EXPECT_EQ(kv.pool().n_cached(), 2);

  // Same prompt: two full blocks hit; the third (partial) is computed.
  PrefixHit hit = kv.find_prefix(prompt);
  ASSERT_EQ(hit.n_tokens, 8);
  EXPECT_EQ(hit.blocks[0], a.table[0]);
  EXPECT_EQ(hit.blocks[1], a.table[1]);
  SeqBlocks b;
  ASSERT_TRUE(kv.allocate(b, 8, 2, &hit, copies));
  EXPECT_EQ(b.table[0], a.table[0]);
  EXPECT_EQ(b.table[1], a.table[1]);
  EXPECT_NE(b.table[2], a.table[2]);
  EXPECT_EQ(kv.pool().ref_count(a.table[0]), 2);
  EXPECT_TRUE(copies.empty());

  // An 8-token prompt that is fully cached: its last token (in a shared block) is recomputed
  // into a private copy of that block.
  auto p8 = iota_tokens(8);
  PrefixHit hit8 = kv.find_prefix(p8);
  ASSERT_EQ(hit8.n_tokens, 8);
  SeqBlocks c;
  ASSERT_TRUE(kv.allocate(c, 7, 1, &hit8, copies));
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, a.table[1]);
  EXPECT_EQ(copies[0].dst, c.table[1]);
  EXPECT_EQ(c.table[0], a.table[0]);
  EXPECT_EQ(kv.pool().ref_count(a.table[1]), 2);  // a and b, not c
  kv.cache_full_blocks(c, p8, 8);                 // the copy duplicates a cached block: not entered twice
  EXPECT_EQ(kv.pool().n_cached(), 2);
  EXPECT_EQ(c.chain[1].id, a.table[1]);

  kv.free(a);
  kv.free(b);
  kv.free(c);
  EXPECT_EQ(kv.pool().n_free(), 16);
  EXPECT_EQ(kv.pool().n_cached(), 2);  // freed blocks keep their hash until reused
  kv.pool().check_invariants();
  EXPECT_EQ(kv.find_prefix(prompt).n_tokens, 8);
}

TEST(KvManager, ExclusiveCachedBlockIsUncachedInsteadOfCopied) {
  KvManager kv(4, 4, true);
  auto p4 = iota_tokens(4);
  SeqBlocks a;
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.allocate(a, 0, 4, nullptr, copies));
  kv.cache_full_blocks(a, p4, 4);
  const BlockId blk = a.table[0];
  kv.free(a);
  PrefixHit hit = kv.find_prefix(p4);
  ASSERT_EQ(hit.n_tokens, 4);
  SeqBlocks b;
  ASSERT_TRUE(kv.allocate(b, 3, 1, &hit, copies));
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(b.table[0], blk);
  EXPECT_FALSE(kv.pool().is_cached(blk));
  kv.cache_full_blocks(b, p4, 4);
  EXPECT_TRUE(kv.pool().is_cached(blk));
  kv.free(b);
  kv.pool().check_invariants();
}

TEST(KvManager, ForkSharesBlocksAndCopiesThePartialBlockOnWrite) {
  KvManager kv(8, 4, false);
  SeqBlocks a, b;
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.allocate(a, 0, 6, nullptr, copies));
  kv.fork(a, b);
  EXPECT_EQ(kv.pool().ref_count(a.table[1]), 2);
  ASSERT_TRUE(kv.allocate(b, 6, 1, nullptr, copies));  // writes position 6: block 1 is shared
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, a.table[1]);
  EXPECT_EQ(copies[0].dst, b.table[1]);
  EXPECT_EQ(b.table[0], a.table[0]);
  ASSERT_TRUE(kv.allocate(a, 6, 1, nullptr, copies));  // now a holds block 1 alone
  EXPECT_EQ(copies.size(), 1u);
  kv.free(a);
  kv.free(b);
  EXPECT_EQ(kv.pool().n_free(), 8);
  kv.pool().check_invariants();
}

TEST(KvManager, AllocateIsAllOrNothing) {
  KvManager kv(3, 4, true);
  SeqBlocks a, b;
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.allocate(a, 0, 8, nullptr, copies));
  EXPECT_FALSE(kv.allocate(b, 0, 5, nullptr, copies));  // needs 2, 1 free
  EXPECT_TRUE(b.table.empty());
  EXPECT_EQ(kv.pool().n_free(), 1);
  ASSERT_TRUE(kv.allocate(b, 0, 4, nullptr, copies));
  EXPECT_FALSE(kv.allocate(b, 4, 1, nullptr, copies));
  EXPECT_EQ(b.table.size(), 1u);
  kv.free(a);
  kv.free(b);
  kv.pool().check_invariants();
}

TEST(KvManager, PrefixCachingOffFindsNothing) {
  KvManager kv(4, 2, false);
  auto t = iota_tokens(4);
  SeqBlocks a;
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.allocate(a, 0, 4, nullptr, copies));
  kv.cache_full_blocks(a, t, 4);
  EXPECT_EQ(kv.find_prefix(t).n_tokens, 0);
  EXPECT_EQ(kv.pool().n_cached(), 0);
  kv.free(a);
}

}  // namespace
}  // namespace mla::kv
