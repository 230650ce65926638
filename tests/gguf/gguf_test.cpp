// GGUF reader/writer: round trips through our writer and the reader's validation of bad input.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "gguf/gguf.h"
#include "raw_gguf.h"
#include "util/error.h"

namespace mla {
namespace {

// Random bytes of a tensor of n_rows rows of ne0 elements (each row with its header, where the type
// has one: ik_llama.cpp's row-scaled types).
std::vector<uint8_t> bytes_of_size(GgmlType t, int64_t ne0, int64_t n_rows, uint32_t seed) {
  std::vector<uint8_t> out(static_cast<size_t>(n_rows * ggml_row_bytes(t, ne0)));
  std::mt19937 rng(seed);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

TEST(Gguf, RoundTripMetadataOfEveryType) {
  GgufWriter w;
  using S = GgufValue::Storage;
  w.set("u8", GgufValue{S{std::in_place_index<0>, uint8_t{200}}});
  w.set("i8", GgufValue{S{std::in_place_index<1>, int8_t{-5}}});
  w.set("u16", GgufValue{S{std::in_place_index<2>, uint16_t{60000}}});
  w.set("i16", GgufValue{S{std::in_place_index<3>, int16_t{-30000}}});
  w.set("u32", GgufValue::u32(4000000000u));
  w.set("i32", GgufValue::i32(-2000000000));
  w.set("f32", GgufValue::f32(1.5e-6f));
  w.set("bool", GgufValue::boolean(true));
  w.set("str", GgufValue::str("héllo\nworld"));
  w.set("u64", GgufValue::u64(18446744073709551615ull));
  w.set("i64", GgufValue{S{std::in_place_index<11>, int64_t{-9000000000000000000}}});
  w.set("f64", GgufValue{S{std::in_place_index<12>, 3.141592653589793}});
  w.set("strs", GgufValue::strings({"a", "", "ccc"}));
  w.set("nested", GgufValue::array(GgufValueType::ARRAY, {GgufValue::i32s({1, 2}), GgufValue::i32s({})}));
  w.set("general.alignment", GgufValue::u32(64));
  auto bytes = w.to_bytes();
  auto f = GgufFile::parse(bytes.data(), bytes.size());
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 64u);
  ASSERT_EQ(f->metadata().size(), 15u);
  EXPECT_EQ(f->get_int("u8"), 200);
  EXPECT_EQ(f->get_int("i8"), -5);
  EXPECT_EQ(f->get_int("u16"), 60000);
  EXPECT_EQ(f->get_int("i16"), -30000);
  EXPECT_EQ(f->get_uint("u32"), 4000000000u);
  EXPECT_EQ(f->get_int("i32"), -2000000000);
  EXPECT_EQ(f->get_float("f32"), 1.5e-6f);
  EXPECT_TRUE(f->get_bool("bool"));
  EXPECT_EQ(f->get_string("str"), "héllo\nworld");
  EXPECT_EQ(f->get_uint("u64"), 18446744073709551615ull);
  EXPECT_THROW(f->get_int("u64"), Error);  // does not fit in int64
  EXPECT_EQ(f->get_int("i64"), -9000000000000000000);
  EXPECT_EQ(f->get_float("f64"), 3.141592653589793);
  EXPECT_EQ(f->get_strings("strs"), (std::vector<std::string>{"a", "", "ccc"}));
  const auto& nested = f->get_array("nested");
  ASSERT_EQ(nested.items.size(), 2u);
  EXPECT_EQ(nested.items[0].as_array().items[1].as_int(), 2);
  EXPECT_TRUE(nested.items[1].as_array().items.empty());
  // Keys keep file order.
  EXPECT_EQ(f->metadata()[0].first, "u8");
  EXPECT_EQ(f->metadata()[14].first, "general.alignment");
}

TEST(Gguf, AccessorErrorsNameKeyAndTypes) {
  GgufWriter w;
  w.set("deepseek2.block_count", GgufValue::str("three"));
  auto bytes = w.to_bytes();
  auto f = GgufFile::parse(bytes.data(), bytes.size(), "m.gguf");
  try {
    f->get_int("deepseek2.block_count");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("deepseek2.block_count"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("expected an integer, got STRING"), std::string::npos) << e.what();
  }
  try {
    f->get_int("deepseek2.context_length");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing required key 'deepseek2.context_length'"), std::string::npos);
  }
  EXPECT_FALSE(f->opt_int("absent").has_value());
  EXPECT_THROW(f->opt_int("deepseek2.block_count"), Error);
}

TEST(Gguf, RoundTripTensorsOfEveryType) {
  GgufWriter w;
  w.set("general.architecture", GgufValue::str("test"));
  int n_types = 0;
  const GgmlType* types = ggml_all_types(&n_types);
  for (int i = 0; i < n_types; ++i) {
    const auto& tr = ggml_traits(types[i]);
    int64_t ne0 = tr.block_elems * 2;
    w.add_tensor(fmt::format("t.{}", tr.name), types[i], {ne0, 3}, bytes_of_size(types[i], ne0, 3, i));
  }
  auto bytes = w.to_bytes();
  auto f = GgufFile::parse(bytes.data(), bytes.size());
  ASSERT_EQ(static_cast<int>(f->tensors().size()), n_types);
  for (int i = 0; i < n_types; ++i) {
    const auto& tr = ggml_traits(types[i]);
    const auto& t = f->require_tensor(fmt::format("t.{}", tr.name));
    EXPECT_EQ(t.type, types[i]);
    EXPECT_EQ(t.ne, (std::vector<int64_t>{tr.block_elems * 2, 3}));
    EXPECT_EQ(t.offset % f->alignment(), 0u);
    auto want = bytes_of_size(types[i], tr.block_elems * 2, 3, i);
    ASSERT_EQ(t.n_bytes, want.size());
    EXPECT_EQ(std::memcmp(t.data, want.data(), want.size()), 0) << tr.name;
  }
}

// A lazy tensor's bytes are made when the file is written, in the file's order, once per write;
// a maker that returns the wrong size fails the write naming the tensor.
TEST(GgufWriter, LazyTensorsAreMadeAtWriteTime) {
  GgufWriter w;
  w.set("general.architecture", GgufValue::str("test"));
  int made = 0;
  const auto want = bytes_of_size(GgmlType::Q4_K, 256, 3, 7);
  w.add_tensor("a", GgmlType::F32, {4}, bytes_of_size(GgmlType::F32, 4, 1, 1));
  w.add_tensor_lazy("b", GgmlType::Q4_K, {256, 3}, want.size(), [&] {
    ++made;
    return want;
  });
  w.add_tensor("c", GgmlType::F32, {4}, bytes_of_size(GgmlType::F32, 4, 1, 2));
  EXPECT_EQ(made, 0);
  auto bytes = w.to_bytes();
  EXPECT_EQ(made, 1);
  auto f = GgufFile::parse(bytes.data(), bytes.size());
  const auto& b = f->require_tensor("b");
  ASSERT_EQ(b.n_bytes, want.size());
  EXPECT_EQ(std::memcmp(b.data, want.data(), want.size()), 0);
  const auto c_want = bytes_of_size(GgmlType::F32, 4, 1, 2);
  EXPECT_EQ(std::memcmp(f->require_tensor("c").data, c_want.data(), c_want.size()), 0);

  GgufWriter bad;
  bad.set("general.architecture", GgufValue::str("test"));
  bad.add_tensor_lazy("short", GgmlType::F32, {8}, 32, [] { return std::vector<uint8_t>(16); });
  try {
    bad.to_bytes();
    FAIL() << "a short lazy tensor was written";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'short' was made with 16 bytes, declared 32"), std::string::npos) << e.what();
  }
}

TEST(Gguf, TypeTableNamesRoundTrip) {
  int n = 0;
  const GgmlType* types = ggml_all_types(&n);
  for (int i = 0; i < n; ++i) EXPECT_EQ(ggml_type_from_name(ggml_type_name(types[i])), types[i]);
  EXPECT_EQ(ggml_type_from_name("q4_k"), GgmlType::Q4_K);
  EXPECT_FALSE(ggml_type_from_name("Q4_0_4_4").has_value());
  EXPECT_FALSE(ggml_type_traits(4).has_value());  // retired id
  // ik_llama.cpp's ids; a row of IQ4_KS (fp32 row scale) / IQ2_KS (fp16) carries its header.
  EXPECT_EQ(ggml_type_from_name("iq4_ks"), GgmlType::IQ4_KS);
  EXPECT_EQ(static_cast<uint32_t>(GgmlType::IQ2_KL), 157u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::IQ4_KS, 512), 4 + 2 * 136);
  EXPECT_EQ(ggml_row_bytes(GgmlType::IQ2_KS, 256), 2 + 70);
  EXPECT_EQ(ggml_row_bytes(GgmlType::Q6_0, 64), 2 * 26);
  EXPECT_FALSE(ggml_type_traits(142).has_value());  // IQ2_TN, retired by ik_llama.cpp
}

// Hostile bytes built in place: each must throw mla::Error with a byte offset, never crash.
void expect_rejected(const std::vector<uint8_t>& b, const std::string& needle) {
  try {
    GgufFile::parse(b.data(), b.size(), "bad.gguf");
    FAIL() << "accepted; expected error containing: " << needle;
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_NE(msg.find("at byte"), std::string::npos) << msg;
  }
}

using Raw = test::RawGguf;

TEST(GgufHostile, Rejections) {
  expect_rejected({}, "truncated");
  expect_rejected({'G', 'G', 'U'}, "truncated");
  expect_rejected(Raw().put<uint32_t>(0x12345678).put<uint32_t>(3).b, "not a GGUF file");
  expect_rejected(Raw().put<uint32_t>(0x46554747).put<uint32_t>(0x03000000).b, "big-endian");
  expect_rejected(Raw().put<uint32_t>(0x46554747).put<uint32_t>(1).b, "version 1");
  expect_rejected(Raw().header(0, 1ull << 62).b, "metadata count");
  expect_rejected(Raw().header(1ull << 62, 0).b, "tensor count");
  expect_rejected(Raw().header(0, 1).put<uint64_t>(1ull << 60).put<uint64_t>(0).put<uint64_t>(0).b, "exceeds");
  expect_rejected(Raw().header(0, 1).str("k").put<uint32_t>(99).b, "unknown metadata value type 99");
  expect_rejected(Raw().header(0, 1).str("k").put<uint32_t>(9).put<uint32_t>(4).put<uint64_t>(1ull << 61).b,
                  "cannot fit");
  expect_rejected(Raw().header(0, 1).str("k").put<uint32_t>(7).put<uint8_t>(2).b, "BOOL value 2");
  expect_rejected(
      Raw().header(0, 2).str("k").put<uint32_t>(4).put<uint32_t>(1).str("k").put<uint32_t>(4).put<uint32_t>(1).b,
      "duplicate metadata key");
  {
    Raw r;  // arrays nested 9 deep
    r.header(0, 1).str("k");
    r.put<uint32_t>(9);
    for (int i = 0; i < 9; ++i) r.put<uint32_t>(9).put<uint64_t>(1);
    r.put<uint32_t>(0).put<uint64_t>(0);
    expect_rejected(r.b, "nested deeper");
  }
  auto tensor = [](Raw& r, const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t off) {
    r.str(name).put<uint32_t>(static_cast<uint32_t>(ne.size()));
    for (auto d : ne) r.put<uint64_t>(d);
    r.put<uint32_t>(type).put<uint64_t>(off);
  };
  {
    Raw r;
    r.header(1, 0);
    tensor(r, "w", {32}, 4, 0);  // retired type id
    expect_rejected(r.b, "unknown type id 4");
  }
  {
    Raw r;
    r.header(1, 0);
    tensor(r, "w", {32, 1ull << 40, 1ull << 40}, 0, 0);
    expect_rejected(r.b, "overflows");
  }
  {
    Raw r;
    r.header(1, 0);
    tensor(r, "w", {1ull << 63}, 0, 0);
    expect_rejected(r.b, "negative or too large");
  }
  {
    Raw r;
    r.header(1, 0);
    tensor(r, "w", {5}, 12, 0);  // Q4_K row of 5 elements
    expect_rejected(r.b, "not a multiple of its block size 256");
  }
  {
    Raw r;
    r.header(1, 0);
    tensor(r, "w", {8}, 0, 0);
    r.b.resize(r.b.size() + 8);  // 8 of 32 data bytes, after padding
    expect_rejected(r.b, "runs past the end");
  }
  {
    Raw r;
    r.header(1, 0);
    tensor(r, "w", {8}, 0, 16);
    expect_rejected(r.b, "not a multiple of the alignment");
  }
  {
    Raw r;
    r.header(2, 0);
    tensor(r, "a", {16}, 0, 0);
    tensor(r, "b", {16}, 0, 32);
    r.b.resize(((r.b.size() + 31) / 32) * 32 + 128);
    expect_rejected(r.b, "overlaps");
  }
  {
    Raw r;
    r.header(2, 0);
    tensor(r, "a", {8}, 0, 0);
    tensor(r, "a", {8}, 0, 32);
    r.b.resize(((r.b.size() + 31) / 32) * 32 + 64);
    expect_rejected(r.b, "duplicate tensor name");
  }
  {
    Raw r;
    r.header(1, 0);
    tensor(r, "w", {}, 0, 0);
    expect_rejected(r.b, "0 dimensions");
  }
}

TEST(GgufHostile, EveryTruncationOfAValidFileIsRejectedCleanly) {
  GgufWriter w;
  w.set("general.architecture", GgufValue::str("x"));
  w.set("a", GgufValue::strings({"x", "yy"}));
  w.add_tensor("t", GgmlType::Q8_0, {64, 2}, bytes_of_size(GgmlType::Q8_0, 64, 2, 1));
  auto full = w.to_bytes();
  size_t data_end = 0;
  {
    auto f = GgufFile::parse(full.data(), full.size());
    const auto& t = f->require_tensor("t");
    data_end = f->data_offset() + t.offset + t.n_bytes;  // the writer's trailing padding is optional
  }
  for (size_t n = 0; n < data_end; ++n) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW(GgufFile::parse(cut.data(), cut.size()), Error) << "length " << n;
  }
}

}  // namespace
}  // namespace mla
