// The prefix cache's lower tiers (kv/tier_store.h) without a model: round trips through host RAM
// and disk, LRU eviction in each, and the files a restart must refuse — corrupt, truncated,
// another fingerprint's, left by a write that did not finish — plus directories that cannot be
// written and writes that fail.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../support/log_capture.h"
#include "kv/block_pool.h"
#include "kv/tier_store.h"

namespace mla::kv {
namespace {

namespace fs = std::filesystem;
using testing::CaptureLog;
using testing::count_occurrences;

constexpr int kBlockSize = 4;
constexpr int64_t kPayload = 96;
constexpr int64_t kFileBytes = 56 + kBlockSize * 4 + kPayload;  // header + tokens + payload

// A fresh directory per test, removed afterwards.
class TierDir : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "mla_tier_test_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(root_, fs::perms::owner_all, fs::perm_options::add, ec);
    for (const auto& e : fs::recursive_directory_iterator(root_, ec))
      fs::permissions(e.path(), fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(root_, ec);
  }
  TierOptions disk_only(int64_t cap = 0) const {
    TierOptions o;
    o.dir = root_;
    o.disk_bytes = cap;
    return o;
  }
  std::vector<fs::path> files(const std::string& dir) const {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path());
    return out;
  }
  std::string root_;
};

// Block number i of a chain whose tokens are i*10 .. i*10+3, parent = block i - 1.
TierBlockPtr make_block(int i, uint64_t parent_hash, uint8_t fill) {
  auto b = std::make_shared<TierBlock>();
  for (int t = 0; t < kBlockSize; ++t) b->tokens.push_back(i * 10 + t);
  b->parent_hash = parent_hash;
  b->hash = hash_block_tokens(parent_hash, b->tokens);
  b->payload.resize(kPayload);
  for (int64_t k = 0; k < kPayload; ++k) b->payload[k] = static_cast<uint8_t>(fill + k * 7);
  return b;
}

std::vector<TierBlockPtr> chain(int n) {
  std::vector<TierBlockPtr> out;
  uint64_t parent = kRootHash;
  for (int i = 0; i < n; ++i) {
    out.push_back(make_block(i, parent, static_cast<uint8_t>(i * 31 + 1)));
    parent = out.back()->hash;
  }
  return out;
}

TierBlockPtr fetch(TierStore& s, const TierBlockPtr& want, int* tier = nullptr) {
  return s.fetch(want->hash, want->parent_hash, want->tokens, tier);
}

void expect_same(const TierBlockPtr& got, const TierBlockPtr& want) {
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->hash, want->hash);
  EXPECT_EQ(got->parent_hash, want->parent_hash);
  EXPECT_EQ(got->tokens, want->tokens);
  EXPECT_EQ(got->payload, want->payload);
}

TEST(TierFingerprint, ChangesWithEveryPartOfTheLayout) {
  const LatentShape base(3, 32, 8, {0, 16, 16});
  const uint64_t f = tier_fingerprint(1, base, GgmlType::F16, 16);
  EXPECT_EQ(f, tier_fingerprint(1, base, GgmlType::F16, 16));
  EXPECT_NE(f, tier_fingerprint(2, base, GgmlType::F16, 16));  // model file / options
  EXPECT_NE(f, tier_fingerprint(1, base, GgmlType::BF16, 16));
  EXPECT_NE(f, tier_fingerprint(1, base, GgmlType::F16, 32));
  EXPECT_NE(f, tier_fingerprint(1, LatentShape(4, 32, 8, {0, 16, 16, 0}), GgmlType::F16, 16));  // an MTP layer
  EXPECT_NE(f, tier_fingerprint(1, LatentShape(3, 32, 8), GgmlType::F16, 16));                  // no indexer keys
  EXPECT_NE(f, tier_fingerprint(1, LatentShape(3, 32, 8, {0, 16, 32}), GgmlType::F16, 16));
  EXPECT_NE(f, tier_fingerprint(1, LatentShape(3, 48, 8, {0, 16, 16}), GgmlType::F16, 16));
}

TEST_F(TierDir, HostTierRoundTripAndLruEviction) {
  TierOptions o;
  o.host_bytes = 2 * (kPayload + kBlockSize * 4);  // two blocks
  TierStore s(o, 7, kBlockSize, kPayload);
  EXPECT_FALSE(s.has_disk());
  auto c = chain(3);
  s.put(c[0]);
  s.put(c[1]);
  int tier = 0;
  expect_same(fetch(s, c[0], &tier), c[0]);  // c[0] is now the most recently used
  EXPECT_EQ(tier, 1);
  s.put(c[2]);  // evicts c[1]
  EXPECT_EQ(fetch(s, c[1]), nullptr);
  expect_same(fetch(s, c[0]), c[0]);
  expect_same(fetch(s, c[2]), c[2]);
  EXPECT_EQ(s.counters().hits[0], 3);
  EXPECT_EQ(s.counters().misses[0], 1);
  EXPECT_EQ(s.counters().host_bytes_used, o.host_bytes);
}

TEST_F(TierDir, ALookupMatchesTokensAndParentNotTheHashAlone) {
  TierOptions o = disk_only();
  o.host_bytes = 1 << 20;
  auto c = chain(2);
  {
    TierStore s(o, 7, kBlockSize, kPayload);
    s.put(c[1]);
    std::vector<int32_t> other = c[1]->tokens;
    other[2] += 1;
    EXPECT_EQ(s.fetch(c[1]->hash, c[1]->parent_hash, other), nullptr);
    EXPECT_EQ(s.fetch(c[1]->hash, kRootHash, c[1]->tokens), nullptr);
    expect_same(fetch(s, c[1]), c[1]);
  }
  o.host_bytes = 0;  // a restart: the disk tier alone
  TierStore s(o, 7, kBlockSize, kPayload);
  std::vector<int32_t> other = c[1]->tokens;
  other[0] = 999;
  EXPECT_EQ(s.fetch(c[1]->hash, c[1]->parent_hash, other), nullptr);
  EXPECT_EQ(s.fetch(c[1]->hash, c[0]->parent_hash, c[1]->tokens), nullptr);
  expect_same(fetch(s, c[1]), c[1]);  // the mismatches did not delete the file
  EXPECT_EQ(s.counters().files_rejected, 0);
}

TEST_F(TierDir, DiskTierSurvivesARestartAndPromotesToHost) {
  auto c = chain(4);
  {
    TierStore s(disk_only(), 42, kBlockSize, kPayload);
    ASSERT_TRUE(s.has_disk());
    for (const auto& b : c) s.put(b);
    s.flush();
    EXPECT_EQ(s.counters().blocks_written, 4);
    EXPECT_EQ(s.counters().bytes_written, 4 * kFileBytes);
    EXPECT_TRUE(s.contains(c[3]->hash));
  }
  EXPECT_EQ(files(root_ + "/" + fmt::format("{:016x}", 42)).size(), 4u);
  TierOptions o = disk_only();
  o.host_bytes = 1 << 20;
  TierStore s(o, 42, kBlockSize, kPayload);
  EXPECT_EQ(s.counters().disk_bytes_used, 4 * kFileBytes);
  int tier = 0;
  for (const auto& b : c) {
    expect_same(fetch(s, b, &tier), b);
    EXPECT_EQ(tier, 2);
  }
  EXPECT_EQ(s.counters().bytes_read, 4 * kFileBytes);
  expect_same(fetch(s, c[2], &tier), c[2]);
  EXPECT_EQ(tier, 1);  // promoted
  s.put(c[0]);         // held already: not written again
  s.flush();
  EXPECT_EQ(s.counters().blocks_written, 0);
}

TEST_F(TierDir, DiskCapEvictsTheLeastRecentlyUsedFiles) {
  auto c = chain(4);
  TierStore s(disk_only(3 * kFileBytes), 5, kBlockSize, kPayload);
  for (int i = 0; i < 3; ++i) s.put(c[i]);
  s.flush();
  expect_same(fetch(s, c[0]), c[0]);  // c[1] is now the least recently used
  s.put(c[3]);
  s.flush();
  EXPECT_EQ(fetch(s, c[1]), nullptr);
  expect_same(fetch(s, c[0]), c[0]);
  expect_same(fetch(s, c[3]), c[3]);
  EXPECT_EQ(s.counters().disk_bytes_used, 3 * kFileBytes);
  EXPECT_EQ(files(s.disk_dir()).size(), 3u);
}

TEST_F(TierDir, ACapBelowOneBlockKeepsNothingAndServesOn) {
  auto c = chain(2);
  TierStore s(disk_only(kFileBytes - 1), 5, kBlockSize, kPayload);
  s.put(c[0]);
  s.put(c[1]);
  s.flush();
  EXPECT_EQ(fetch(s, c[0]), nullptr);
  EXPECT_EQ(s.counters().disk_bytes_used, 0);
  EXPECT_TRUE(files(s.disk_dir()).empty());
}

// Writes two blocks to disk and returns their file paths.
std::vector<std::string> write_two(const TierOptions& o, uint64_t fp, const std::vector<TierBlockPtr>& c) {
  TierStore s(o, fp, kBlockSize, kPayload);
  s.put(c[0]);
  s.put(c[1]);
  s.flush();
  return {s.disk_dir() + "/" + fmt::format("{:016x}", c[0]->hash) + ".blk",
          s.disk_dir() + "/" + fmt::format("{:016x}", c[1]->hash) + ".blk"};
}

TEST_F(TierDir, ACorruptPayloadIsSkippedWithOneWarningAndDeleted) {
  auto c = chain(2);
  auto paths = write_two(disk_only(), 9, c);
  {
    std::fstream f(paths[1], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(kFileBytes - 10);
    f.put('\x5a');
  }
  CaptureLog cap;
  TierStore s(disk_only(), 9, kBlockSize, kPayload);
  expect_same(fetch(s, c[0]), c[0]);
  EXPECT_EQ(fetch(s, c[1]), nullptr);
  EXPECT_FALSE(fs::exists(paths[1]));
  EXPECT_EQ(fetch(s, c[1]), nullptr);  // gone: no second warning
  EXPECT_EQ(count_occurrences(cap.text(), "checksum mismatch"), 1) << cap.text();
  EXPECT_EQ(s.counters().files_rejected, 1);
  EXPECT_EQ(s.counters().hits[1], 1);
}

TEST_F(TierDir, TruncatedAndUnfinishedFilesAreDeletedAtStart) {
  auto c = chain(2);
  auto paths = write_two(disk_only(), 9, c);
  fs::resize_file(paths[1], kFileBytes / 2);  // cut mid-block
  const std::string tmp = fs::path(paths[0]).parent_path().string() + "/00000000000000ab.tmp";
  std::ofstream(tmp) << "half a block";  // a writer killed before its rename
  CaptureLog cap;
  TierStore s(disk_only(), 9, kBlockSize, kPayload);
  EXPECT_FALSE(fs::exists(paths[1]));
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_EQ(count_occurrences(cap.text(), "truncated"), 1) << cap.text();
  EXPECT_EQ(count_occurrences(cap.text(), "did not finish"), 1) << cap.text();
  EXPECT_EQ(s.counters().files_rejected, 2);
  expect_same(fetch(s, c[0]), c[0]);
  EXPECT_EQ(fetch(s, c[1]), nullptr);
}

TEST_F(TierDir, AnotherFingerprintsBlocksAreNeverRead) {
  auto c = chain(2);
  auto paths = write_two(disk_only(), 1, c);  // model 1's directory
  {
    TierStore other(disk_only(), 2, kBlockSize, kPayload);  // model 2 in the same root
    EXPECT_EQ(fetch(other, c[0]), nullptr);
    EXPECT_EQ(other.counters().files_rejected, 0);
    // A model-1 file copied into model 2's directory is refused by its header.
    fs::copy_file(paths[0], other.disk_dir() + "/" + fs::path(paths[0]).filename().string());
  }
  CaptureLog cap;
  TierStore s2(disk_only(), 2, kBlockSize, kPayload);
  EXPECT_EQ(fetch(s2, c[0]), nullptr);
  EXPECT_EQ(s2.counters().files_rejected, 1);
  EXPECT_EQ(count_occurrences(cap.text(), "another model's"), 1) << cap.text();
  EXPECT_TRUE(fs::exists(paths[0]));  // model 1's own file is untouched
  TierStore s1(disk_only(), 1, kBlockSize, kPayload);
  expect_same(fetch(s1, c[0]), c[0]);
  // Another block geometry under the same fingerprint (a bug elsewhere) is refused as well.
  TierStore wide(disk_only(), 1, kBlockSize, kPayload + 32);
  EXPECT_EQ(wide.counters().files_rejected, 2);
}

TEST_F(TierDir, AnUnusableDirectoryLeavesTheHostTierServing) {
  const std::string file = root_ + "/not-a-dir";
  std::ofstream(file) << "x";
  TierOptions o;
  o.dir = file;
  o.host_bytes = 1 << 20;
  CaptureLog cap;
  TierStore s(o, 3, kBlockSize, kPayload);
  EXPECT_FALSE(s.has_disk());
  EXPECT_EQ(count_occurrences(cap.text(), "cannot use"), 1) << cap.text();
  auto c = chain(1);
  s.put(c[0]);
  expect_same(fetch(s, c[0]), c[0]);
}

TEST_F(TierDir, AReadOnlyDirectoryIsReadButNotWritten) {
  if (geteuid() == 0) GTEST_SKIP() << "root writes through directory permissions";
  auto c = chain(3);
  auto paths = write_two(disk_only(), 4, c);
  const std::string dir = fs::path(paths[0]).parent_path().string();
  fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec);
  CaptureLog cap;
  TierStore s(disk_only(), 4, kBlockSize, kPayload);
  expect_same(fetch(s, c[1]), c[1]);
  s.put(c[2]);
  s.flush();
  EXPECT_EQ(fetch(s, c[2]), nullptr);
  EXPECT_EQ(count_occurrences(cap.text(), "not writable"), 1) << cap.text();
}

// A write the file system refuses (here: the file size limit, as a full disk would with ENOSPC)
// costs the block and one warning; the store keeps serving what it has.
TEST_F(TierDir, FailingWritesAreDroppedWithOneWarning) {
  auto c = chain(3);
  auto paths = write_two(disk_only(), 6, c);
  struct rlimit old {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit tiny = old;
  tiny.rlim_cur = 64;  // the header fits, the block does not
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &tiny), 0);
  CaptureLog cap;
  {
    TierStore s(disk_only(), 6, kBlockSize, kPayload);
    s.put(c[2]);
    s.put(make_block(7, kRootHash, 3));
    s.flush();
    EXPECT_EQ(s.counters().write_errors, 2);
    EXPECT_EQ(s.counters().blocks_written, 0);
    EXPECT_EQ(fetch(s, c[2]), nullptr);
    expect_same(fetch(s, c[0]), c[0]);
  }
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(count_occurrences(cap.text(), "cannot write"), 1) << cap.text();
  for (const auto& p : files(fs::path(paths[0]).parent_path().string()))
    EXPECT_FALSE(p.string().ends_with(".tmp")) << p;  // the failed writes left nothing behind
}

// Read-ahead: a chain's disk blocks are read on the reader thread up to the first block the disk
// lacks; a lookup then takes them without reading (here the files are gone by then).
TEST_F(TierDir, PrefetchReadsAChainAheadUpToItsFirstMiss) {
  auto c = chain(4);
  {
    TierStore s(disk_only(), 11, kBlockSize, kPayload);
    for (int i : {0, 1, 3}) s.put(c[i]);  // block 2 is not on disk
  }
  TierOptions o = disk_only();
  o.prefetch_bytes = 2 * kPayload;
  TierStore s(o, 11, kBlockSize, kPayload);
  std::vector<TierStore::ChainBlock> want;
  for (const auto& b : c) want.push_back({b->hash, b->parent_hash, b->tokens});
  s.prefetch(want);
  s.flush_prefetch();
  EXPECT_EQ(s.counters().bytes_read, 2 * kFileBytes);  // blocks 0 and 1; the chain ends at 2
  EXPECT_EQ(s.counters().hits[1], 0);                  // hits count when a lookup takes them
  for (const auto& p : files(s.disk_dir())) fs::remove(p);
  int tier = 0;
  expect_same(fetch(s, c[0], &tier), c[0]);
  EXPECT_EQ(tier, 2);
  expect_same(fetch(s, c[1]), c[1]);
  EXPECT_EQ(fetch(s, c[1]), nullptr);  // taken: the file is gone and no host tier keeps it
  EXPECT_EQ(s.counters().hits[1], 2);
  // A budget of one block keeps the latest read only.
  o.prefetch_bytes = kPayload;
  TierStore t(o, 12, kBlockSize, kPayload);
  for (int i : {0, 1}) t.put(c[i]);
  t.flush();
  t.prefetch({want[0], want[1]});
  t.flush_prefetch();
  for (const auto& p : files(t.disk_dir())) fs::remove(p);
  EXPECT_EQ(fetch(t, c[0]), nullptr);
  expect_same(fetch(t, c[1]), c[1]);
}

TEST_F(TierDir, AFullWriterQueueDropsBlocksWithoutWaiting) {
  TierOptions o = disk_only();
  o.writer_queue = 1;
  TierStore s(o, 8, kBlockSize, kPayload);
  auto c = chain(40);
  for (const auto& b : c) s.put(b);
  s.flush();
  const TierCounters n = s.counters();
  EXPECT_EQ(n.blocks_written + n.writes_dropped, 40);
  EXPECT_GT(n.blocks_written, 0);
  for (const auto& b : c)
    if (s.contains(b->hash)) expect_same(fetch(s, b), b);
}

}  // namespace
}  // namespace mla::kv
