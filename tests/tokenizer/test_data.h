#pragma once
// Locates the shared read-only test data (../shared/data next to the repository root).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace mla::test {

// MLA_TEST_DIR is <repo>/tests; the data lives in <repo>/../shared/data.
inline std::filesystem::path shared_data_dir() {
  return std::filesystem::path(MLA_TEST_DIR).parent_path().parent_path() / "shared" / "data";
}

// The path of a shared data file; fails the test with a clear message when it is missing.
inline std::string shared_file(const std::string& rel) {
  auto p = shared_data_dir() / rel;
  if (!std::filesystem::exists(p)) {
    ADD_FAILURE() << "missing shared test data: " << p
                  << " (the tests expect ../shared/data next to the repository root; in a worktree: "
                     "ln -s /work/shared <worktree>/../shared)";
    return {};
  }
  return p.string();
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace mla::test
