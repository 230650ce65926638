// Split GGUF models: any shard's name opens the whole model; shards that are missing, foreign,
// renamed or inconsistent are refused with one line naming the file.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/gguf_split.h"
#include "util/error.h"

namespace mla {
namespace {

namespace fs = std::filesystem;
using S = GgufValue::Storage;

GgufValue u16(uint16_t x) { return GgufValue{S{std::in_place_index<2>, x}}; }

std::vector<uint8_t> tensor_bytes(int n_floats, uint8_t seed) {
  std::vector<uint8_t> b(static_cast<size_t>(n_floats) * 4);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(seed + i * 7);
  return b;
}

// One test's scratch directory, removed at the end of the test.
class GgufShards : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "mla_gguf_shards_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string shard_path(int i, int n, const std::string& prefix = "model") const {
    return gguf_split_path((fs::path(dir_) / prefix).string(), i, n);
  }

  // The layout gguf-split writes: the model's keys in shard 0 only, then split.no,
  // split.tensors.count and split.count in every shard. tensors[i] lists shard i's tensor names.
  GgufWriter shard_writer(int i, const std::vector<std::vector<std::string>>& tensors) const {
    GgufWriter w;
    int n_total = 0;
    for (const auto& names : tensors) n_total += static_cast<int>(names.size());
    if (i == 0) {
      w.set("general.architecture", GgufValue::str("deepseek2"));
      w.set("general.name", GgufValue::str("split-test"));
    }
    w.set(std::string(gguf_split_key::kNo), u16(static_cast<uint16_t>(i)));
    w.set(std::string(gguf_split_key::kTensorsCount), GgufValue::i32(n_total));
    w.set(std::string(gguf_split_key::kCount), u16(static_cast<uint16_t>(tensors.size())));
    for (const auto& name : tensors[i]) {
      uint8_t seed = static_cast<uint8_t>(name[0]);
      int n = 8 + 4 * (name[0] - 'a');
      w.add_tensor(name, GgmlType::F32, {n}, tensor_bytes(n, seed));
    }
    return w;
  }

  const std::vector<std::vector<std::string>> layout_ = {{"a", "b"}, {"c"}, {"d", "e"}};
  void write_all(const std::vector<std::vector<std::string>>& layout) const {
    int n = static_cast<int>(layout.size());
    for (int i = 0; i < n; ++i) shard_writer(i, layout).write(shard_path(i, n));
  }

  // Opening `path` fails with one line that contains every string of `needles`.
  void expect_refused(const std::string& path, const std::vector<std::string>& needles) const {
    try {
      GgufFile::open(path);
      ADD_FAILURE() << "opened " << path;
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      for (const auto& s : needles) EXPECT_NE(msg.find(s), std::string::npos) << "'" << s << "' not in: " << msg;
    }
  }

  std::string dir_;
};

TEST_F(GgufShards, AnyShardNameOpensTheWholeModel) {
  write_all(layout_);
  for (int given = 0; given < 3; ++given) {
    auto f = GgufFile::open(shard_path(given, 3), /*prefault=*/true);
    EXPECT_EQ(f->path(), shard_path(0, 3));
    EXPECT_EQ(f->get_string("general.name"), "split-test");
    ASSERT_EQ(f->tensors().size(), 5u);
    const char* names[] = {"a", "b", "c", "d", "e"};
    const uint32_t shard_of[] = {0, 0, 1, 2, 2};
    for (size_t k = 0; k < 5; ++k) {
      const GgufTensorInfo& t = f->tensors()[k];
      EXPECT_EQ(t.name, names[k]);
      EXPECT_EQ(t.shard, shard_of[k]);
      EXPECT_EQ(f->find_tensor(names[k]), &t);
      std::vector<uint8_t> want = tensor_bytes(static_cast<int>(t.ne[0]), static_cast<uint8_t>(names[k][0]));
      ASSERT_EQ(t.n_bytes, want.size());
      EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.n_bytes), want) << names[k];
    }
    auto shards = f->shards();
    ASSERT_EQ(shards.size(), 3u);
    const size_t n_tensors[] = {2, 1, 2};
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(shards[i].path, shard_path(i, 3));
      EXPECT_EQ(shards[i].file_size, fs::file_size(shard_path(i, 3)));
      EXPECT_EQ(shards[i].n_tensors, n_tensors[i]);
    }
  }
}

TEST_F(GgufShards, SingleFilesAreNotSplit) {
  GgufWriter w;
  w.set("general.architecture", GgufValue::str("deepseek2"));
  w.add_tensor("a", GgmlType::F32, {8}, tensor_bytes(8, 1));
  std::string plain = (fs::path(dir_) / "plain.gguf").string();
  w.write(plain);
  auto f = GgufFile::open(plain);
  ASSERT_EQ(f->shards().size(), 1u);
  EXPECT_EQ(f->shards()[0].path, plain);
  EXPECT_EQ(f->shards()[0].n_tensors, 1u);
  EXPECT_EQ(f->shards()[0].file_size, fs::file_size(plain));

  // gguf-split's merge leaves split.count = 0 in its output; a split into one file has 1.
  for (uint16_t count : {0, 1}) {
    w.set(std::string(gguf_split_key::kNo), u16(0));
    w.set(std::string(gguf_split_key::kTensorsCount), GgufValue::i32(1));
    w.set(std::string(gguf_split_key::kCount), u16(count));
    std::string path = shard_path(0, 1, "one" + std::to_string(count));
    w.write(path);
    auto g = GgufFile::open(path);
    EXPECT_EQ(g->shards().size(), 1u);
    EXPECT_EQ(g->tensors().size(), 1u);
  }
  // A file named like a shard 1 but without split keys is just a file.
  std::string named = shard_path(0, 3, "renamed");
  fs::copy_file(plain, named);
  EXPECT_EQ(GgufFile::open(named)->tensors().size(), 1u);
}

TEST_F(GgufShards, MissingShardIsNamed) {
  write_all(layout_);
  fs::remove(shard_path(1, 3));
  for (int given : {0, 2}) expect_refused(shard_path(given, 3), {shard_path(1, 3), "missing", "shard 2 of 3"});
}

TEST_F(GgufShards, ShardOfAnotherModelIsNamed) {
  write_all(layout_);
  // Shard 2 from a 4-shard model dropped in under this model's name.
  GgufWriter w = shard_writer(1, layout_);
  w.set(std::string(gguf_split_key::kCount), u16(4));
  w.write(shard_path(1, 3));
  expect_refused(shard_path(0, 3), {shard_path(1, 3), "split.count is 4, expected 3"});
}

TEST_F(GgufShards, WrongSplitNoIsNamed) {
  write_all(layout_);
  fs::copy_file(shard_path(1, 3), shard_path(2, 3), fs::copy_options::overwrite_existing);
  expect_refused(shard_path(0, 3), {shard_path(2, 3), "split.no is 1", "expected 2"});
}

TEST_F(GgufShards, NameDisagreeingWithSplitKeysIsNamed) {
  write_all(layout_);
  std::string other = shard_path(0, 4);  // says 4 shards, holds split.count = 3
  fs::copy_file(shard_path(0, 3), other);
  expect_refused(other, {other, "must be named PREFIX-00001-of-00003.gguf"});
  std::string plain = (fs::path(dir_) / "model.gguf").string();
  fs::copy_file(shard_path(0, 3), plain);
  expect_refused(plain, {plain, "must be named"});
}

TEST_F(GgufShards, TensorsCountMismatchIsNamed) {
  auto layout = layout_;
  write_all(layout);
  layout[2].push_back("f");  // shard 0 says 5; the shards now hold 6
  shard_writer(2, layout).write(shard_path(2, 3));
  expect_refused(shard_path(0, 3), {shard_path(2, 3), "split.tensors.count is 6", "says 5"});
  GgufWriter w = shard_writer(2, layout_);
  w.add_tensor("f", GgmlType::F32, {8}, tensor_bytes(8, 3));
  w.write(shard_path(2, 3));  // split.tensors.count 5 everywhere, 6 tensors
  expect_refused(shard_path(0, 3), {shard_path(0, 3), "split.tensors.count is 5 but the 3 shards hold 6 tensors"});
}

TEST_F(GgufShards, DuplicateTensorAcrossShardsIsNamed) {
  write_all({{"a", "b"}, {"c"}, {"d", "b"}});
  expect_refused(shard_path(1, 3), {shard_path(2, 3), "tensor 'b' is also in " + shard_path(0, 3)});
}

TEST_F(GgufShards, LaterShardWithoutSplitKeysIsNamed) {
  write_all(layout_);
  GgufWriter w;
  w.add_tensor("c", GgmlType::F32, {16}, tensor_bytes(16, 'c'));
  w.write(shard_path(1, 3));
  expect_refused(shard_path(0, 3), {shard_path(1, 3), "no 'split.count' key", "not shard 2 of 3"});
  expect_refused(shard_path(1, 3), {shard_path(1, 3), "named as shard 2 of 3 but has no 'split.count' key"});
}

TEST_F(GgufShards, SplitKeysOfTheWrongTypeAreNamed) {
  write_all(layout_);
  GgufWriter w = shard_writer(0, layout_);
  w.set(std::string(gguf_split_key::kCount), GgufValue::u32(3));
  w.write(shard_path(0, 3));
  expect_refused(shard_path(0, 3), {shard_path(0, 3), "'split.count' has type UINT32, expected UINT16"});
  w = shard_writer(0, layout_);
  w.set(std::string(gguf_split_key::kTensorsCount), GgufValue::u32(5));
  w.write(shard_path(0, 3));
  expect_refused(shard_path(1, 3), {shard_path(0, 3), "'split.tensors.count' has type UINT32, expected INT32"});
}

}  // namespace
}  // namespace mla

namespace mla {
namespace {

// gguf-split's planning rules, on a file of tensors of the given F32 element counts.
std::unique_ptr<GgufFile> file_of(const std::vector<int>& n_floats, std::vector<uint8_t>& bytes) {
  GgufWriter w;
  for (size_t i = 0; i < n_floats.size(); ++i)
    w.add_tensor("t" + std::to_string(i), GgmlType::F32, {n_floats[i]}, tensor_bytes(n_floats[i], 1));
  bytes = w.to_bytes();
  return GgufFile::parse(bytes.data(), bytes.size());
}

using Plan = std::vector<std::vector<size_t>>;

TEST(GgufSplitPlan, ByTensorCount) {
  std::vector<uint8_t> b;
  auto f = file_of({8, 8, 8, 8, 8}, b);
  GgufSplitOptions o;
  o.max_tensors = 2;
  EXPECT_EQ(gguf_split_plan(*f, o), (Plan{{0, 1}, {2, 3}, {4}}));
  o.no_tensor_first_split = true;
  EXPECT_EQ(gguf_split_plan(*f, o), (Plan{{}, {0, 1}, {2, 3}, {4}}));
  o = {};  // default 128: one shard
  EXPECT_EQ(gguf_split_plan(*f, o), (Plan{{0, 1, 2, 3, 4}}));
  o.max_tensors = 0;
  EXPECT_THROW(gguf_split_plan(*f, o), Error);
}

TEST(GgufSplitPlan, BySizeCountsEachTensorPaddedTo32) {
  std::vector<uint8_t> b;
  // 36 bytes count as 64; 250,000 floats are 1,000,000 bytes, exactly 1M.
  auto f = file_of({9, 249984, 9, 250000, 8}, b);
  GgufSplitOptions o;
  o.max_bytes = parse_split_size("1M");
  EXPECT_EQ(o.max_bytes, 1000000u);
  // 64 + 999,936 = 1,000,000 fits; + 64 does not; then 1,000,000 alone; then 32.
  EXPECT_EQ(gguf_split_plan(*f, o), (Plan{{0, 1}, {2}, {3}, {4}}));
  // A tensor above the limit gets a shard of its own, except as the first tensor of the file.
  std::vector<uint8_t> b1;
  auto big_later = file_of({8, 250008, 8}, b1);
  EXPECT_EQ(gguf_split_plan(*big_later, o), (Plan{{0}, {1}, {2}}));
  std::vector<uint8_t> b2;
  auto big = file_of({250008, 8}, b2);
  try {
    gguf_split_plan(*big, o);
    ADD_FAILURE() << "planned a shard without tensors";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 't0' (1000032 bytes) is larger than --split-max-size"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(parse_split_size("50G"), 50000000000ull);
  for (const char* bad : {"", "M", "10", "10K", "0G", "-1M", "1.5G", "99999999999G"})
    EXPECT_THROW(parse_split_size(bad), Error) << bad;
}

}  // namespace
}  // namespace mla
