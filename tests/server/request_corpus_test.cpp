// The request fuzzer's harness (fuzz/request_harness.h) over the checked-in seeds and past
// findings in tests/fixtures/request-seeds/, so `make test` holds every input the fuzzer ever
// broke the contract with (`make fuzz` runs the harness for millions of inputs). Both depths:
// RequestHarness (fuzz_request) and RequestParserHarness (fuzz_request_parser, the parsers
// without the chat template).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <vector>

#include "../../fuzz/request_harness.h"
#include "../tokenizer/test_data.h"

namespace mla::fuzz {
namespace {

std::vector<std::string> load_seeds() {
  std::vector<std::string> seeds;
  for (const auto& entry : std::filesystem::directory_iterator(test::fixture_dir() / "request-seeds")) {
    std::ifstream in(entry.path(), std::ios::binary);
    seeds.emplace_back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  return seeds;
}

std::string run(RequestParserHarness& h, const std::string& bytes) {
  return h.run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

// The parameter: true for the whole request side (RequestHarness), false for the parsers alone.
class RequestCorpus : public ::testing::TestWithParam<bool> {};

std::unique_ptr<RequestParserHarness> make_harness(bool full) {
  if (full) return std::make_unique<RequestHarness>();
  return std::make_unique<RequestParserHarness>();
}

TEST_P(RequestCorpus, EverySeedKeepsTheErrorContract) {
  auto harness = make_harness(GetParam());
  auto seeds = load_seeds();
  EXPECT_GE(seeds.size(), 16u) << "seed corpus missing";
  for (const auto& s : seeds) EXPECT_EQ(run(*harness, s), "") << s.substr(0, 200);
}

// Values that parsers get wrong: wrong types, numbers at and past every integer width, deep
// nesting, strings that are not what a field wants.
nlohmann::json nasty(std::mt19937& rng) {
  static const std::vector<nlohmann::json> values = [] {
    std::vector<nlohmann::json> v = {nullptr,
                                     true,
                                     false,
                                     0,
                                     -1,
                                     1.5,
                                     -0.0,
                                     1e308,
                                     -1e308,
                                     1e-320,
                                     INT32_MAX,
                                     int64_t{INT32_MAX} + 1,
                                     INT64_MAX,
                                     INT64_MIN,
                                     UINT64_MAX,
                                     "",
                                     "16",
                                     "x",
                                     std::string(3000, 'a'),
                                     nlohmann::json::array(),
                                     nlohmann::json::object(),
                                     {1, "a", nullptr},
                                     {{"type", 5}},
                                     {{"role", "user"}},
                                     {{"type", "tool"}, {"name", 5}}};
    nlohmann::json deep = 1;
    for (int i = 0; i < 200; ++i) deep = nlohmann::json::array({deep});
    v.push_back(deep);
    v.push_back(nlohmann::json::array({{{"role", 5}, {"content", "x"}}}));
    v.push_back(nlohmann::json::array({{{"type", "text"}, {"text", 5}}}));
    return v;
  }();
  return values[rng() % values.size()];
}

void mutate(nlohmann::json& j, std::mt19937& rng, int depth = 0) {
  if (!j.is_structured() || j.empty() || depth > 6 || rng() % 4 == 0) {
    j = nasty(rng);
    return;
  }
  if (j.is_object()) {
    auto it = j.begin();
    std::advance(it, rng() % j.size());
    if (rng() % 8 == 0) {
      j.erase(it);
      return;
    }
    mutate(it.value(), rng, depth + 1);
  } else {
    mutate(j[rng() % j.size()], rng, depth + 1);
  }
}

// A deterministic mutator (fixed seed) over the seeds, for builds without libFuzzer: JSON-level
// (a node replaced by a nasty value, a field dropped) and byte-level (truncation, flips).
// MLA_REQUEST_MUTATIONS sets the count (default 3000, well under a second).
TEST_P(RequestCorpus, RandomMutationsKeepTheErrorContract) {
  auto harness = make_harness(GetParam());
  auto seeds = load_seeds();
  ASSERT_FALSE(seeds.empty());
  const char* env = std::getenv("MLA_REQUEST_MUTATIONS");
  const int n = env ? std::atoi(env) : 3000;
  std::mt19937 rng(20261201);
  int n_broken = 0;
  for (int i = 0; i < n && n_broken < 10; ++i) {
    const std::string& seed = seeds[rng() % seeds.size()];
    std::string input;
    if (rng() % 3 != 0 && nlohmann::json::accept(seed.substr(1))) {
      nlohmann::json j = nlohmann::json::parse(seed.substr(1));
      for (int k = 1 + static_cast<int>(rng() % 3); k > 0; --k) mutate(j, rng);
      input = seed.substr(0, 1) + j.dump();
    } else {
      input = seed;
      if (rng() % 2 && input.size() > 1) input.resize(1 + rng() % (input.size() - 1));
      for (int k = static_cast<int>(rng() % 4); k > 0 && input.size() > 1; --k)
        input[1 + rng() % (input.size() - 1)] = static_cast<char>(rng());
    }
    std::string broken = run(*harness, input);
    if (!broken.empty()) {
      ++n_broken;
      ADD_FAILURE() << "mutation " << i << ": " << broken << "\ninput: " << input.substr(0, 600);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Depths, RequestCorpus, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Full" : "ParsersOnly"; });

// The harness itself must be able to fail: a 5xx for bad input, or a multi-line message.
TEST(RequestHarnessContract, CatchesABrokenContract) {
  EXPECT_THROW(check_error(500, "x"), ContractBroken);
  EXPECT_THROW(check_error(400, "two\nlines"), ContractBroken);
  EXPECT_THROW(check_error(400, ""), ContractBroken);
  EXPECT_NO_THROW(check_error(404, "one line"));
}

}  // namespace
}  // namespace mla::fuzz
