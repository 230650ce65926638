// kv/block_file.h: the disk tier's block file. One validity check serves the directory scan
// (header and size) and every read (header, size, then tokens, payload and checksum), so a file
// is refused for the same reason either way.
#include "kv/block_file.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "kv/tier_store.h"

namespace mla::kv {
namespace {

namespace fs = std::filesystem;

class BlockFile : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "mla_block_file_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    block_.hash = 0xabcdef0123456789ull;
    block_.parent_hash = 42;
    block_.tokens = {1, 2, 3, 4};
    block_.payload.assign(24, 7);
    int64_t bytes = 0;
    ASSERT_EQ(write_block_file(dir_, spec_, block_, bytes), "");
    EXPECT_EQ(bytes, 56 + 4 * 4 + 24);  // header, tokens, payload
    path_ = dir_ + "/" + block_file_name(block_.hash);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // Why the scan refuses the file ("" when it keeps it), and why a read does.
  std::string scan_problem() const {
    BlockFileHeader h{};
    bool header_read = false;
    int64_t size = 0;
    EXPECT_TRUE(read_block_file_header(path_, h, header_read, size));
    return block_file_problem(h, header_read, size, spec_, block_.hash);
  }
  std::string read_problem() const {
    TierBlock got;
    bool gone = false;
    int64_t n_read = 0;
    return read_block_file(path_, spec_, block_.hash, got, gone, n_read);
  }
  void overwrite(size_t offset, const void* bytes, size_t n) const {
    std::fstream f(path_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(offset));
    f.write(static_cast<const char*>(bytes), static_cast<std::streamsize>(n));
  }
  BlockFileSpec spec_{0x1122334455667788ull, 4, 24};
  TierBlock block_;
  std::string dir_, path_;
};

TEST_F(BlockFile, RoundTripsAndNamesItselfByHash) {
  EXPECT_EQ(block_file_name(block_.hash), "abcdef0123456789.blk");
  uint64_t h = 0;
  EXPECT_TRUE(parse_block_file_name("abcdef0123456789.blk", h));
  EXPECT_EQ(h, block_.hash);
  EXPECT_FALSE(parse_block_file_name("ABCDEF0123456789.blk", h));
  EXPECT_FALSE(parse_block_file_name("abcdef012345678.blk", h));
  EXPECT_EQ(scan_problem(), "");
  TierBlock got;
  bool gone = true;
  int64_t n_read = 0;
  ASSERT_EQ(read_block_file(path_, spec_, block_.hash, got, gone, n_read), "");
  EXPECT_FALSE(gone);
  EXPECT_EQ(n_read, 56 + 16 + 24);
  EXPECT_EQ(got.tokens, block_.tokens);
  EXPECT_EQ(got.payload, block_.payload);
  EXPECT_EQ(got.parent_hash, 42u);
}

TEST_F(BlockFile, ScanAndReadRefuseTheSameFilesForTheSameReason) {
  // Another fingerprint (bytes 16..23 of the header).
  const uint64_t other = 1;
  overwrite(16, &other, sizeof other);
  EXPECT_EQ(scan_problem(), "another model's or layout's block (fingerprint 0000000000000001)");
  EXPECT_EQ(read_problem(), scan_problem());
  overwrite(16, &spec_.fingerprint, sizeof spec_.fingerprint);
  EXPECT_EQ(scan_problem(), "");
  // Truncated: one payload byte short.
  fs::resize_file(path_, fs::file_size(path_) - 1);
  EXPECT_EQ(scan_problem(), "95 bytes, expected 96: truncated");
  EXPECT_EQ(read_problem(), scan_problem());
  // Another geometry: the spec of a store with 8-token blocks.
  fs::resize_file(path_, 96);
  spec_.block_size = 8;
  EXPECT_EQ(scan_problem(), "block geometry differs");
  EXPECT_EQ(read_problem(), scan_problem());
}

TEST_F(BlockFile, AReadChecksTheChecksumTheScanDoesNotRead) {
  const uint8_t flipped = 8;
  overwrite(56 + 16, &flipped, 1);  // the first payload byte
  EXPECT_EQ(scan_problem(), "");    // the scan reads headers and sizes only
  EXPECT_EQ(read_problem(), "checksum mismatch");
  fs::remove(path_);
  TierBlock got;
  bool gone = false;
  int64_t n_read = 0;
  EXPECT_NE(read_block_file(path_, spec_, block_.hash, got, gone, n_read), "");
  EXPECT_TRUE(gone);
}

}  // namespace
}  // namespace mla::kv
