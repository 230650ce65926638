// kv/lru.h ByteLru, the tier store's LRU under a byte budget: order of use, byte accounting,
// eviction to a budget from the least recently used end.
#include "kv/lru.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mla::kv {
namespace {

TEST(ByteLru, EvictsLeastRecentlyUsedFirstAndCountsBytes) {
  ByteLru<int, std::string> lru;
  EXPECT_TRUE(lru.insert(1, "a", 10));
  EXPECT_TRUE(lru.insert(2, "b", 20));
  EXPECT_TRUE(lru.insert(3, "c", 30));
  EXPECT_FALSE(lru.insert(2, "again", 99));  // a held key is left as it is
  EXPECT_EQ(*lru.find(2), "b");
  EXPECT_EQ(lru.bytes(), 60);
  EXPECT_EQ(lru.size(), 3u);
  lru.touch(1);  // order of use now 2, 3, 1
  lru.touch(7);  // absent: nothing happens
  std::vector<std::pair<int, std::string>> evicted;
  lru.evict_to(35, [&](int k, const std::string& v) { evicted.emplace_back(k, v); });
  EXPECT_EQ(evicted, (std::vector<std::pair<int, std::string>>{{2, "b"}, {3, "c"}}));
  EXPECT_EQ(lru.bytes(), 10);
  EXPECT_TRUE(lru.contains(1));
  EXPECT_FALSE(lru.contains(2));
  EXPECT_EQ(lru.find(3), nullptr);
}

TEST(ByteLru, EraseReturnsTheValueAndAnEmptyMapEvictsNothing) {
  ByteLru<uint64_t, int> lru;
  lru.evict_to(0);  // nothing held: no effect
  EXPECT_TRUE(lru.empty());
  lru.insert(5, 50, 4);
  lru.insert(6, 60, 4);
  EXPECT_EQ(lru.erase(5), std::optional<int>(50));
  EXPECT_EQ(lru.erase(5), std::nullopt);
  EXPECT_EQ(lru.bytes(), 4);
  lru.evict_to(4);  // at the budget: nothing goes
  EXPECT_EQ(lru.size(), 1u);
  lru.evict_to(0);
  EXPECT_TRUE(lru.empty());
  EXPECT_EQ(lru.bytes(), 0);
}

}  // namespace
}  // namespace mla::kv
