// The MLA_* environment table: unknown names are found and matched to the closest known one.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "util/env.h"

namespace mla {
namespace {

TEST(Env, UnknownMlaVariablesAreReportedWithTheClosestKnownName) {
  std::vector<std::string> entries = {"PATH=/bin", "MLA_TRACE=dispatch:1", "MLA_TRCE=dispatch:1", "MLA_LOGLEVEL=debug",
                                      "MLA_=x",    "XMLA_TRACE=1"};
  std::vector<char*> env;
  for (auto& e : entries) env.push_back(e.data());
  env.push_back(nullptr);
  EXPECT_EQ(unknown_env_vars(env.data()), (std::vector<std::string>{"MLA_TRCE", "MLA_LOGLEVEL", "MLA_"}));
  EXPECT_EQ(closest_env_var("MLA_TRCE"), "MLA_TRACE");
  EXPECT_EQ(closest_env_var("MLA_LOGLEVEL"), "MLA_LOG_LEVEL");
  // A variable that was removed names what replaced it.
  EXPECT_NE(removed_env_var_replacement("MLA_EXACT_ATTENTION").find("--attention-precision"), std::string::npos);
  EXPECT_TRUE(removed_env_var_replacement("MLA_TRCE").empty());
}

// The test suite's variables are known (a test that sets one gets no start-up warning) but are not
// the product's: --help-env does not print them.
TEST(Env, TestVariablesAreKnownButNotInTheHelp) {
  std::vector<std::string> entries = {"MLA_BIN=/x/mla", "MLA_FUZZ_CASES=10", "MLA_SOAK_SECONDS=1", "MLA_SOAK_SECOND=1"};
  std::vector<char*> env;
  for (auto& e : entries) env.push_back(e.data());
  env.push_back(nullptr);
  EXPECT_EQ(unknown_env_vars(env.data()), (std::vector<std::string>{"MLA_SOAK_SECOND"}));
  EXPECT_EQ(closest_env_var("MLA_SOAK_SECOND"), "MLA_SOAK_SECONDS");
  const std::string help = env_help_text();
  ASSERT_FALSE(test_env_vars().empty());
  for (const auto& v : test_env_vars()) EXPECT_EQ(help.find(std::string(v.name)), std::string::npos) << v.name;
  EXPECT_NE(help.find("MLA_PREFAULT"), std::string::npos);
  EXPECT_NE(help.find("--no-prefault"), std::string::npos);
}

TEST(Env, HelpTextListsEveryVariable) {
  const std::string help = env_help_text();
  for (const auto& v : env_vars()) {
    EXPECT_NE(help.find(std::string(v.name)), std::string::npos) << v.name;
    EXPECT_FALSE(v.help.empty()) << v.name;
  }
}

}  // namespace
}  // namespace mla
