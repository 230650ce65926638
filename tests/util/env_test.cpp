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

TEST(Env, HelpTextListsEveryVariable) {
  const std::string help = env_help_text();
  for (const auto& v : env_vars()) {
    EXPECT_NE(help.find(std::string(v.name)), std::string::npos) << v.name;
    EXPECT_FALSE(v.help.empty()) << v.name;
  }
}

}  // namespace
}  // namespace mla
