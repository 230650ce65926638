#include "engine/speculative.h"

#include <nlohmann/json.hpp>
#include <string>

#include "util/error.h"

namespace mla {

int parse_speculative_config(std::string_view text) {
  if (text.empty()) return 0;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    fail("--speculative-config: not valid JSON ({})", e.what());
  }
  if (!j.is_object())
    fail(R"(--speculative-config: expected a JSON object such as {{"method": "mtp", "num_speculative_tokens": 2}})");
  for (const auto& [key, value] : j.items())
    if (key != "method" && key != "num_speculative_tokens")
      fail("--speculative-config: unknown key '{}' (known: method, num_speculative_tokens)", key);
  if (!j.contains("method")) fail(R"(--speculative-config: "method" is missing (only "mtp" is supported))");
  if (!j["method"].is_string() || j["method"].get<std::string>() != "mtp")
    fail(R"(--speculative-config: method {} is not supported (only "mtp": the model's own MTP layer))",
         j["method"].dump());
  if (!j.contains("num_speculative_tokens")) fail("--speculative-config: num_speculative_tokens is missing");
  const auto& k = j["num_speculative_tokens"];
  if (!k.is_number_integer()) fail("--speculative-config: num_speculative_tokens must be an integer, got {}", k.dump());
  const auto n = k.get<int64_t>();
  if (n < 1 || n > kMaxSpeculativeTokens)
    fail("--speculative-config: num_speculative_tokens must be 1 to {}, got {}", kMaxSpeculativeTokens, n);
  return static_cast<int>(n);
}

SpecAcceptance spec_acceptance(int64_t n_drafts, int64_t n_draft_tokens, int64_t n_accepted_tokens) {
  SpecAcceptance s;
  const auto accepted = static_cast<double>(n_accepted_tokens);
  if (n_draft_tokens > 0) s.rate = accepted / static_cast<double>(n_draft_tokens);
  if (n_drafts > 0) s.mean_len = 1.0 + accepted / static_cast<double>(n_drafts);
  return s;
}

}  // namespace mla
