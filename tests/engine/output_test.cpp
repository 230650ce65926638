// Stop checks and text deltas: stop strings across token boundaries are held back while they
// could still match and never emitted, even partially.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/output.h"

namespace mla {
namespace {

// Token i is the piece kPieces[i].
const std::vector<std::string> kPieces = {"<eos>", "He", "llo", " wor", "ld", "!", "o", " w", "x"};

class PieceDecoder : public TextDecoder {
 public:
  struct Inc : IncrementalDecoder {
    std::string push(int32_t t) override { return kPieces[t]; }
    std::string flush() override { return ""; }
  };
  std::unique_ptr<IncrementalDecoder> start(std::span<const int32_t>, bool) const override {
    return std::make_unique<Inc>();
  }
};

struct FedRun {
  std::vector<std::string> deltas;
  std::string text;
  std::optional<FinishReason> finish;
  std::variant<std::monostate, std::string, int32_t> stop_reason;
};

FedRun feed(const std::vector<int32_t>& tokens, const SamplingParams& p, const std::vector<int32_t>& eos = {0}) {
  PieceDecoder dec;
  SeqOutput out;
  out.start(&dec, {}, p);
  FedRun r;
  int n = 0;
  for (int32_t t : tokens) {
    auto fin = out.on_token(t, std::nullopt, ++n, false, p, eos);
    auto d = out.take_delta(0, n);
    r.deltas.push_back(d.text);
    r.text += d.text;
    if (d.finish_reason) {
      r.finish = d.finish_reason;
      r.stop_reason = d.stop_reason;
    }
    if (fin) break;
  }
  return r;
}

TEST(SeqOutput, StopStringAcrossTokensIsHeldBackAndCut) {
  SamplingParams p;
  p.max_tokens = 100;
  p.stop = {"o wo"};
  FedRun r = feed({1, 2, 3, 4}, p);  // "He" "llo" " wor" → "Hello wor" contains "o wo"
  EXPECT_EQ(r.deltas, (std::vector<std::string>{"He", "ll", ""}));
  EXPECT_EQ(r.text, "Hell");
  EXPECT_EQ(r.finish, FinishReason::kStop);
  EXPECT_EQ(std::get<std::string>(r.stop_reason), "o wo");
}

TEST(SeqOutput, HeldTextIsReleasedWhenTheMatchFails) {
  SamplingParams p;
  p.max_tokens = 100;
  p.stop = {"o wo"};
  FedRun r = feed({1, 2, 5, 0}, p);  // "Hello" then "!" breaks the match, then EOS
  EXPECT_EQ(r.deltas, (std::vector<std::string>{"He", "ll", "o!", ""}));
  EXPECT_EQ(r.finish, FinishReason::kStop);
  EXPECT_TRUE(std::holds_alternative<std::monostate>(r.stop_reason));
}

TEST(SeqOutput, IncludeStopStringInOutput) {
  SamplingParams p;
  p.max_tokens = 100;
  p.stop = {"lo w"};
  p.include_stop_str_in_output = true;
  FedRun r = feed({1, 2, 3, 4}, p);
  EXPECT_EQ(r.text, "Hello w");
}

TEST(SeqOutput, EarliestOfSeveralStopStrings) {
  SamplingParams p;
  p.max_tokens = 100;
  p.stop = {"ld", "wor", "llo w"};
  FedRun r = feed({1, 2, 3, 4}, p);
  EXPECT_EQ(r.text, "He");
  EXPECT_EQ(std::get<std::string>(r.stop_reason), "llo w");
}

TEST(SeqOutput, MaxTokensFlushesHeldText) {
  SamplingParams p;
  p.max_tokens = 2;
  p.stop = {"o wo"};
  FedRun r = feed({1, 2}, p);
  EXPECT_EQ(r.text, "Hello");
  EXPECT_EQ(r.finish, FinishReason::kLength);
}

TEST(SeqOutput, StopTokenIdsAndMinTokens) {
  SamplingParams p;
  p.max_tokens = 100;
  p.stop_token_ids = {5};
  p.min_tokens = 2;
  FedRun r = feed({5, 1, 5}, p);  // the first "!" comes before min_tokens
  EXPECT_EQ(r.text, "!He");
  EXPECT_EQ(std::get<int32_t>(r.stop_reason), 5);
}

TEST(SeqOutput, IgnoreEos) {
  SamplingParams p;
  p.max_tokens = 3;
  p.ignore_eos = true;
  FedRun r = feed({1, 0, 2}, p);
  EXPECT_EQ(r.finish, FinishReason::kLength);
}

TEST(SeqOutput, AbortDropsAPartialStopString) {
  SamplingParams p;
  p.max_tokens = 100;
  p.stop = {"o wo"};
  PieceDecoder dec;
  SeqOutput out;
  out.start(&dec, {}, p);
  out.on_token(1, std::nullopt, 1, false, p, {});
  out.on_token(2, std::nullopt, 2, false, p, {});
  out.finish_external(FinishReason::kAbort);
  auto d = out.take_delta(0, 2);
  EXPECT_EQ(d.text, "Hell");
  EXPECT_EQ(d.finish_reason, FinishReason::kAbort);
  EXPECT_FALSE(out.has_delta());
}

}  // namespace
}  // namespace mla
