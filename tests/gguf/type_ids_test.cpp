// Tensor-type ids of llama.cpp and ik_llama.cpp: the table against the type traits, the evidence
// rules on a hypothetical colliding id (the real tables collide nowhere today), and crafted files.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/type_ids.h"
#include "raw_gguf.h"
#include "util/error.h"

namespace mla {
namespace {

TEST(TypeIds, TableAgreesWithTypeTraits) {
  uint32_t last = 0;
  bool first = true;
  for (const TypeIdEntry& e : type_id_table()) {
    EXPECT_TRUE(first || e.id > last) << "ids out of order at " << e.id;
    first = false;
    last = e.id;
    EXPECT_FALSE(e.mainline.empty() && e.ik.empty()) << e.id;
    if (e.type) {
      EXPECT_EQ(static_cast<uint32_t>(*e.type), e.id) << e.id;
      EXPECT_TRUE(ggml_type_traits(e.id).has_value()) << e.id;
      // mla.cpp names a type as the engine that assigns it does (llama.cpp's name when both do).
      EXPECT_EQ(ggml_type_name(*e.type), e.mainline.empty() ? e.ik : e.mainline) << e.id;
    }
  }
  // Every id mla.cpp has a layout for is in the table.
  int n = 0;
  const GgmlType* all = ggml_all_types(&n);
  for (int i = 0; i < n; ++i) {
    bool found = false;
    for (const TypeIdEntry& e : type_id_table()) found |= e.type == all[i];
    EXPECT_TRUE(found) << ggml_type_name(all[i]);
  }
}

TEST(TypeIds, NoIdMeansTwoFormatsToday) {
  for (const TypeIdEntry& e : type_id_table()) {
    if (!e.mainline.empty() && !e.ik.empty()) {
      EXPECT_TRUE(e.same_format) << e.id;
    }
  }
}

// A table where id 7 is F32 in llama.cpp and F16 in ik_llama.cpp (4 vs 2 bytes per element),
// id 8 is llama.cpp-only (F32) and id 9 ik-only (F16).
const TypeIdEntry kCollision[] = {
    {7, "F32", "F16", false, std::nullopt},
    {8, "F32", "", false, GgmlType::F32},
    {9, "", "F16", false, GgmlType::F16},
};

TypeIdTensor tensor(std::string_view name, uint32_t id, uint64_t room = 1u << 20) { return {name, id, 64, 64, room}; }

TEST(TypeIds, CollidingIdIsReadInTheSpaceTheFileNames) {
  {
    const TypeIdTensor ts[] = {tensor("a", 7), tensor("b", 9)};
    const auto r = resolve_type_ids(ts, std::nullopt, kCollision);
    EXPECT_EQ(r.space, TypeIdSpace::Ik);
    EXPECT_EQ(r.types[0], GgmlType::F16);
  }
  {
    const TypeIdTensor ts[] = {tensor("a", 7), tensor("b", 8)};
    const auto r = resolve_type_ids(ts, std::nullopt, kCollision);
    EXPECT_EQ(r.space, TypeIdSpace::Mainline);
    EXPECT_EQ(r.types[0], GgmlType::F32);
  }
  {
    // ik_llama.cpp's own file types (>= 100) name it too.
    const TypeIdTensor ts[] = {tensor("a", 7)};
    const auto r = resolve_type_ids(ts, int64_t{140}, kCollision);
    EXPECT_EQ(r.space, TypeIdSpace::Ik);
    EXPECT_EQ(r.types[0], GgmlType::F16);
  }
}

TEST(TypeIds, WithoutEvidenceTheSizeDecides) {
  // 64 elements: 256 bytes as F32, 128 as F16. Room for 128 bytes only: the F16 reading.
  const TypeIdTensor fits_f16[] = {tensor("a", 7, 128)};
  EXPECT_EQ(resolve_type_ids(fits_f16, std::nullopt, kCollision).types[0], GgmlType::F16);
  const TypeIdTensor fits_both[] = {tensor("attn.weight", 7, 256)};
  try {
    resolve_type_ids(fits_both, std::nullopt, kCollision);
    FAIL() << "an undecidable id was read";
  } catch (const TypeIdError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("tensor 'attn.weight' has type id 7"), std::string::npos) << msg;
    EXPECT_NE(msg.find("F32 (llama.cpp id 7)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("F16 (ik_llama.cpp id 7)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("nothing in the file says which engine wrote it"), std::string::npos) << msg;
    EXPECT_EQ(e.tensor(), 0u);
  }
}

TEST(TypeIds, ContradictingEvidenceIsRefused) {
  const TypeIdTensor ts[] = {tensor("m", 8), tensor("k", 9), tensor("x", 7, 256)};
  try {
    resolve_type_ids(ts, std::nullopt, kCollision);
    FAIL() << "contradicting evidence was accepted";
  } catch (const TypeIdError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("tensor 'm' is llama.cpp-only and tensor 'k' ik_llama.cpp-only"), std::string::npos) << msg;
    EXPECT_EQ(e.tensor(), 2u);
  }
}

// ---- crafted files ------------------------------------------------------------------------

using Raw = test::RawGguf;

struct FakeTensor {
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t id;
  uint64_t bytes;  // room given to it in the data section
};

// A GGUF v3 file with the given tensors (zero data, packed at 32-byte alignment) and an optional
// general.file_type.
std::vector<uint8_t> craft(const std::vector<FakeTensor>& ts, std::optional<uint32_t> file_type = std::nullopt) {
  Raw r;
  r.put<uint32_t>(0x46554747).put<uint32_t>(3).put<uint64_t>(ts.size()).put<uint64_t>(file_type ? 1 : 0);
  if (file_type) r.str("general.file_type").put<uint32_t>(4).put<uint32_t>(*file_type);
  uint64_t off = 0;
  for (const auto& t : ts) {
    r.str(t.name).put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) r.put<uint64_t>(d);
    r.put<uint32_t>(t.id).put<uint64_t>(off);
    off += (t.bytes + 31) / 32 * 32;
  }
  r.b.resize((r.b.size() + 31) / 32 * 32 + off, 0);
  return r.b;
}

std::string load_error(const std::vector<uint8_t>& b) {
  try {
    GgufFile::parse(b.data(), b.size(), "crafted.gguf");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TypeIdFiles, SpaceFollowsTheFilesIds) {
  const std::vector<uint8_t> nvfp4 = craft({{"w", {64, 2}, 40, 72}, {"n", {64}, 0, 256}});
  auto f = GgufFile::parse(nvfp4.data(), nvfp4.size());
  EXPECT_EQ(f->type_id_space(), "llama.cpp");
  EXPECT_EQ(f->require_tensor("w").type, GgmlType::NVFP4);
  EXPECT_EQ(f->require_tensor("w").n_bytes, 72u);

  // IQ2_KT rows carry a 4-byte scale: 2 rows of 256 are 2 * (4 + 68) bytes.
  const std::vector<uint8_t> kt = craft({{"w", {256, 2}, 153, 144}});
  f = GgufFile::parse(kt.data(), kt.size());
  EXPECT_EQ(f->type_id_space(), "ik_llama.cpp");
  EXPECT_EQ(f->require_tensor("w").type, GgmlType::IQ2_KT);
  EXPECT_EQ(f->require_tensor("w").n_bytes, 144u);

  // Id 41 is one format in both engines (llama.cpp's Q1_0, ik_llama.cpp's Q1_0_G128).
  const std::vector<uint8_t> q1 = craft({{"w", {128, 1}, 41, 18}, {"q", {32}, 8, 34}});
  f = GgufFile::parse(q1.data(), q1.size());
  EXPECT_EQ(f->type_id_space(), "either");
  EXPECT_EQ(f->require_tensor("w").type, GgmlType::Q1_0);

  // ik_llama.cpp's file type IQ4_K (140) names its space even when every id is common.
  const std::vector<uint8_t> ft = craft({{"q", {32}, 8, 34}}, 140);
  EXPECT_EQ(GgufFile::parse(ft.data(), ft.size())->type_id_space(), "ik_llama.cpp");
}

TEST(TypeIdFiles, RefusalsNameTensorIdAndSpace) {
  std::string msg = load_error(craft({{"blk.0.ffn_down_exps.weight", {32}, 36, 64}}));
  EXPECT_NE(
      msg.find("tensor 'blk.0.ffn_down_exps.weight' has type I2_S (ik_llama.cpp id 36), which mla.cpp cannot read"),
      std::string::npos)
      << msg;
  EXPECT_NE(msg.find("at byte"), std::string::npos) << msg;
  msg = load_error(craft({{"w", {32}, 500, 64}}));
  EXPECT_NE(msg.find("tensor 'w' has unknown type id 500 (neither llama.cpp nor ik_llama.cpp assigns it)"),
            std::string::npos)
      << msg;
  // A row-interleaved ik form mla.cpp does not convert is refused by its ik name.
  msg = load_error(craft({{"w", {256, 4}, 229, 4 * 56}}));
  EXPECT_NE(msg.find("IQ1_M_R4 (ik_llama.cpp id 229)"), std::string::npos) << msg;
  // One it converts needs whole groups of rows.
  msg = load_error(craft({{"w", {256, 6}, 212, 6 * 144}}));
  EXPECT_NE(msg.find("tensor 'w' of type Q4_K_R4 (ik_llama.cpp id 212) has 6 rows, not a multiple of 4"),
            std::string::npos)
      << msg;
}

TEST(TypeIdFiles, TrellisRowHeadersCountInTheSize) {
  // 4 rows of 256 IQ4_KT: 4 * (4 + 128) bytes; 4 * 128 (no headers) runs past the end.
  const std::string msg = load_error(craft({{"w", {256, 4}, 155, 4 * 128}}));
  EXPECT_NE(msg.find("runs past the end"), std::string::npos) << msg;
  const std::vector<uint8_t> ok = craft({{"w", {256, 4}, 155, 4 * 132}});
  EXPECT_EQ(GgufFile::parse(ok.data(), ok.size())->require_tensor("w").n_bytes, 4u * 132u);
}

}  // namespace
}  // namespace mla
