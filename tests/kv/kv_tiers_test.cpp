// KvManager over the prefix cache's lower tiers (no model): a lookup goes on past the arena's run
// in the tiers, allocate turns the blocks found into loads into fresh arena blocks that are cached
// at once, newly cached blocks are listed for the tiers once, and a lookup repeated while its
// sequence waits for blocks does not read the tiers again.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "../support/log_capture.h"
#include "kv/kv_manager.h"
#include "util/trace.h"

namespace mla::kv {
namespace {

using testing::CaptureLog;

constexpr int kBs = 4;
constexpr int64_t kPayload = 32;

std::vector<int32_t> iota_tokens(int n, int start = 100) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

// Hands the blocks the arena cached to the store, each with a payload naming its block.
void store_new(KvManager& kv, TierStore& s) {
  for (NewCachedBlock& n : kv.take_new_blocks()) {
    auto b = std::make_shared<TierBlock>();
    b->hash = n.hash;
    b->parent_hash = n.parent_hash;
    b->tokens = n.tokens;
    b->payload.assign(kPayload, static_cast<uint8_t>(n.tokens[0]));
    s.put(b);
  }
}

TEST(KvTiers, ALookupGoesOnInTheTiersAndLoadsBecomeCachedArenaBlocks) {
  TierOptions o;
  o.host_bytes = 1 << 20;
  TierStore store(o, 1, kBs, kPayload);
  KvManager kv(6, kBs, true);
  kv.set_tiers(&store);
  const auto prompt = iota_tokens(13);  // 3 full blocks

  SeqBlocks a;
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.allocate(a, 0, 13, nullptr, copies));
  kv.cache_full_blocks(a, prompt, 13);
  store_new(kv, store);
  EXPECT_TRUE(kv.take_new_blocks().empty());  // listed once
  kv.free(a);
  // Another sequence takes every block: the prompt's blocks leave the arena.
  SeqBlocks filler;
  ASSERT_TRUE(kv.allocate(filler, 0, 24, nullptr, copies));
  const auto other = iota_tokens(24, 5000);
  kv.cache_full_blocks(filler, other, 24);
  store_new(kv, store);
  kv.free(filler);
  EXPECT_EQ(kv.find_prefix(prompt).blocks.size(), 0u);  // filler's blocks now: evicted below

  // The first block is recomputed into the arena (a cached arena block), the next two come from tier 1.
  SeqBlocks b;
  ASSERT_TRUE(kv.allocate(b, 0, 4, nullptr, copies));
  kv.cache_full_blocks(b, prompt, 4);
  EXPECT_TRUE(kv.take_new_blocks().empty());  // tier 1 holds it already
  PrefixHit hit = kv.find_prefix(prompt);
  ASSERT_EQ(hit.blocks.size(), 1u);
  ASSERT_EQ(hit.loads.size(), 2u);
  EXPECT_EQ(hit.n_tokens, 12);
  EXPECT_EQ(hit.loads[1]->payload[0], 108);  // block 2 starts with token 108
  EXPECT_EQ(hit.load_tiers, (std::vector<int8_t>{1, 1}));

  SeqBlocks c;
  copies.clear();
  ASSERT_TRUE(kv.allocate(c, 12, 1, &hit, copies));
  ASSERT_EQ(copies.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(copies[i].src, kNoBlock);
    EXPECT_EQ(copies[i].dst, c.table[1 + i]);
    EXPECT_EQ(copies[i].load, hit.loads[i]);
    EXPECT_TRUE(kv.pool().is_cached(c.table[1 + i]));
  }
  EXPECT_EQ(c.table[0], b.table[0]);
  EXPECT_EQ(c.chain.size(), 3u);
  EXPECT_EQ(kv.tier_loads().blocks[0], 2);
  EXPECT_EQ(kv.tier_loads().tokens, 8);
  // The loaded blocks are the arena's now: the next lookup finds all three there.
  EXPECT_EQ(kv.find_prefix(prompt).blocks.size(), 3u);
  kv.free(b);
  kv.free(c);
  kv.pool().check_invariants();
}

TEST(KvTiers, AWaitingSequencesRepeatedLookupReadsTheTiersOnce) {
  TierOptions o;
  o.host_bytes = 1 << 20;
  TierStore store(o, 1, kBs, kPayload);
  KvManager kv(4, kBs, true);
  kv.set_tiers(&store);
  const auto prompt = iota_tokens(9);
  SeqBlocks a;
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.allocate(a, 0, 9, nullptr, copies));
  kv.cache_full_blocks(a, prompt, 8);
  store_new(kv, store);
  kv.free(a);
  SeqBlocks hog;  // holds every block: the prompt's leave the arena and nothing is free
  ASSERT_TRUE(kv.allocate(hog, 0, 16, nullptr, copies));
  for (int attempt = 0; attempt < 3; ++attempt) {
    PrefixHit hit = kv.find_prefix(prompt);
    ASSERT_EQ(hit.loads.size(), 2u);
    SeqBlocks w;
    EXPECT_FALSE(kv.allocate(w, 8, 1, &hit, copies));  // no free block: the sequence waits
  }
  EXPECT_EQ(store.counters().hits[0], 2);  // the first attempt's two blocks, not six
  {
    CaptureLog cap;  // the tiers trace: one line per lookup that reached the tiers, up to N
    trace_configure("tiers:1");
    kv.find_prefix(prompt);
    kv.find_prefix(prompt);
    trace_reset();
    EXPECT_EQ(cap.text(), "tiers lookup blocks=2 arena=0 host=2 disk=0 reused=2\n");
  }
  kv.free(hog);
  PrefixHit hit = kv.find_prefix(prompt);
  SeqBlocks w;
  ASSERT_TRUE(kv.allocate(w, 8, 1, &hit, copies));
  EXPECT_EQ(store.counters().hits[0], 2);
  kv.free(w);
  kv.pool().check_invariants();
}

}  // namespace
}  // namespace mla::kv
