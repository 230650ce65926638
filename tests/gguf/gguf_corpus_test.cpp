// The checked-in corpus of malformed files (tools/make_bad_gguf.py): each is rejected with one
// clear error that names the byte offset, and the valid seed file loads.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "util/error.h"

namespace mla {
namespace {

const std::filesystem::path kDir = std::filesystem::path(MLA_TEST_DIR) / "fixtures" / "gguf-bad";

TEST(GgufCorpus, EveryBadFileIsRejectedWithItsError) {
  std::ifstream in(kDir / "manifest.json");
  ASSERT_TRUE(in) << "missing " << (kDir / "manifest.json");
  auto manifest = nlohmann::json::parse(in);
  ASSERT_GE(manifest.size(), 25u);
  for (const auto& [file, needle] : manifest.items()) {
    try {
      GgufFile::open((kDir / file).string());
      ADD_FAILURE() << file << " was accepted";
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(needle.get<std::string>()), std::string::npos) << file << ": " << msg;
      EXPECT_NE(msg.find("at byte"), std::string::npos) << file << ": " << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << file << ": multi-line error";
    }
  }
}

TEST(GgufCorpus, ValidSeedLoads) {
  auto f = GgufFile::open((kDir / "valid.gguf").string());
  EXPECT_EQ(f->get_string("general.architecture"), "deepseek2");
  EXPECT_EQ(f->get_int("deepseek2.block_count"), 2);
  const auto& t = f->require_tensor("token_embd.weight");
  EXPECT_EQ(t.ne, (std::vector<int64_t>{32, 2}));
  const float* x = reinterpret_cast<const float*>(t.data);
  EXPECT_EQ(x[63], 63.0f);
}

}  // namespace
}  // namespace mla
