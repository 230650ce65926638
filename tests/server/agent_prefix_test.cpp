// Prefix reuse for agent clients: what changes from one request to the next only where it must.
// Claude Code's per-request billing line ("x-anthropic-billing-header: ...; cch=<hash>;") opens
// its system prompt; the Anthropic endpoint drops it, so the rest of the prompt can match the
// prefix cache.
#include <gtest/gtest.h>

#include "server/anthropic_protocol.h"

namespace mla::server {
namespace {

json system_of(const std::string& body) {
  return parse_anthropic_request(json::parse(body), {1000, 4096}, false).messages.at(0);
}

TEST(AgentPrefix, TheBillingLineLeavesTheSystemPromptAsBlocksOrAsAString) {
  const json blocks = system_of(R"({"max_tokens": 8, "system": [
      {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.100.7b4; cc_entrypoint=cli; cch=eb6c6;"},
      {"type": "text", "text": "You are an agent.\nBe brief."}],
      "messages": [{"role": "user", "content": "hi"}]})");
  EXPECT_EQ(blocks, json::parse(R"({"role": "system", "content": "You are an agent.\nBe brief."})"));
  const json text = system_of(R"({"max_tokens": 8,
      "system": "x-anthropic-billing-header: cc_version=2.1.1.abc; cch=00001;\nYou are an agent.",
      "messages": [{"role": "user", "content": "hi"}]})");
  EXPECT_EQ(text["content"], "You are an agent.");
  // Only a line that starts with the header goes; the same words elsewhere stay.
  const json kept = system_of(R"({"max_tokens": 8,
      "system": "Quote: x-anthropic-billing-header: a;\nx-anthropic-billing-header: b;",
      "messages": [{"role": "user", "content": "hi"}]})");
  EXPECT_EQ(kept["content"], "Quote: x-anthropic-billing-header: a;\n");
}

}  // namespace
}  // namespace mla::server
