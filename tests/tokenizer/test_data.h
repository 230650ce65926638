#pragma once
// Locates the third-party test data kept in tests/fixtures (vocabularies, tokenizer files, chat
// templates; provenance and licences in tests/fixtures/README.md).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace mla::test {

// MLA_TEST_DIR is <repo>/tests.
inline std::filesystem::path fixture_dir() { return std::filesystem::path(MLA_TEST_DIR) / "fixtures"; }

// The path of a fixture file (relative to tests/fixtures); fails the test with a clear message
// when it is missing.
inline std::string fixture_file(const std::string& rel) {
  auto p = fixture_dir() / rel;
  if (!std::filesystem::exists(p)) {
    ADD_FAILURE() << "missing test fixture: " << p;
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
