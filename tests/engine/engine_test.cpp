// The engine on a fake model (tests/engine/fake_runner.h): scheduling, chunked prefill, prefix
// caching, preemption, n > 1, aborts, errors, threads — and batch invariance: a request's greedy
// tokens and logits are bit-identical alone and in any batch.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>

#include "engine/text_decoder.h"
#include "engine_harness.h"
#include "fake_runner.h"
#include "util/error.h"

namespace mla::testing {
namespace {

constexpr int kVocab = 61;

std::vector<int32_t> make_prompt(int n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int32_t> p(n);
  for (auto& t : p) t = 1 + static_cast<int32_t>(gen() % (kVocab - 1));
  return p;
}

SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  return p;
}

std::function<std::unique_ptr<ModelRunner>()> fake(int block_size, int n_blocks, GgmlType dtype = GgmlType::F16,
                                                   std::shared_ptr<FakeRunner::StepLog> log = nullptr) {
  return [=] { return std::make_unique<FakeRunner>(kVocab, block_size, n_blocks, dtype, log); };
}

// Eight requests of different lengths arriving at different steps.
std::vector<Arrival> mixed_arrivals(int max_tokens) {
  const int lens[] = {1, 3, 17, 40, 5, 64, 9, 33};
  const int at[] = {0, 0, 1, 2, 3, 5, 8, 13};
  std::vector<Arrival> a;
  for (int i = 0; i < 8; ++i)
    a.push_back({"r" + std::to_string(i), make_prompt(lens[i], 100 + i), greedy(max_tokens + i), at[i]});
  return a;
}

// Each request alone, with a big budget and no prefix cache.
RunResult solo_runs(const std::vector<Arrival>& arrivals, MlaPathPolicy policy) {
  RunResult all;
  for (auto a : arrivals) {
    a.at_step = 0;
    auto r = run_engine(fake(16, 64), config(policy, 2048, false), {a});
    all.seqs[a.id] = r.seqs[a.id];
    all.logits[a.id] = r.logits[a.id];
  }
  return all;
}

void expect_same(const RunResult& want, const RunResult& got, const std::string& what) {
  for (const auto& [id, seqs] : want.seqs) {
    ASSERT_TRUE(got.seqs.count(id)) << what << ": " << id;
    EXPECT_EQ(got.seqs.at(id)[0].tokens, seqs[0].tokens) << what << ": tokens of " << id;
    const auto& wl = want.logits.at(id);
    const auto& gl = got.logits.at(id);
    ASSERT_EQ(wl.size(), gl.size()) << what << ": " << id;
    for (const auto& [pos, row] : wl) {
      ASSERT_TRUE(gl.count(pos)) << what << ": " << id << " position " << pos;
      // Bit-identical: compare the bytes, not within a tolerance.
      EXPECT_EQ(0, std::memcmp(row.data(), gl.at(pos).data(), row.size() * sizeof(float)))
          << what << ": logits of " << id << " at position " << pos;
    }
  }
}

TEST(Engine, GreedyRunMatchesTheModelComputedWithoutACache) {
  Arrival a{"a", make_prompt(21, 1), greedy(9), 0};
  FakeRunner ref_model(kVocab, 4, 1);
  auto r = run_engine(fake(4, 32, GgmlType::F32), config(MlaPathPolicy::Mha, 8, true), {a});
  const auto& toks = r.seqs["a"][0].tokens;
  ASSERT_EQ(toks.size(), 9u);
  std::vector<int32_t> ctx = a.prompt;
  for (size_t i = 0; i < toks.size(); ++i) {
    auto ref = ref_model.reference_logits(ctx);
    const auto& got = r.logits["a"][static_cast<int>(ctx.size()) - 1];
    for (size_t v = 0; v < ref.size(); ++v) ASSERT_EQ(ref[v], got[v]) << i << " " << v;
    ctx.push_back(static_cast<int32_t>(std::max_element(ref.begin(), ref.end()) - ref.begin()));
    EXPECT_EQ(toks[i], ctx.back()) << i;
  }
  EXPECT_EQ(r.seqs["a"][0].finish, FinishReason::kLength);
  // 21 prompt tokens in chunks of 8: 8, 8, 5, then 8 decodes.
  EXPECT_EQ(r.counters.n_steps, 3 + 8);
  EXPECT_EQ(r.counters.n_prompt_tokens, 21);
  EXPECT_EQ(r.counters.n_generation_tokens, 9);
}

class BatchInvariance : public ::testing::TestWithParam<MlaPathPolicy> {};

TEST_P(BatchInvariance, AloneEqualsBatchedForEveryBudgetWithAndWithoutPrefixCache) {
  const auto arrivals = mixed_arrivals(6);
  const RunResult solo = solo_runs(arrivals, GetParam());
  for (int budget : {8, 16, 64, 2048}) {
    for (bool prefix : {false, true}) {
      auto got = run_engine(fake(16, 64), config(GetParam(), budget, prefix), arrivals);
      expect_same(solo, got, "budget " + std::to_string(budget) + (prefix ? " prefix" : ""));
    }
  }
}

TEST_P(BatchInvariance, PrefixHitsAndPreemptionDoNotChangeResults) {
  // Requests share a 40-token prefix; the later ones hit the cache. The cache holds 12 blocks of
  // 8 tokens, so running them together forces preemptions.
  const auto shared = make_prompt(40, 7);
  std::vector<Arrival> arrivals;
  for (int i = 0; i < 5; ++i) {
    auto p = shared;
    auto tail = make_prompt(3 + 5 * i, 50 + i);
    p.insert(p.end(), tail.begin(), tail.end());
    arrivals.push_back({"s" + std::to_string(i), p, greedy(20), i == 0 ? 0 : 6 + i});
  }
  const RunResult solo = solo_runs(arrivals, GetParam());
  auto got = run_engine(fake(8, 12), config(GetParam(), 16, true), arrivals);
  expect_same(solo, got, "prefix + preemption");
  EXPECT_GT(got.counters.n_preemptions, 0);
  EXPECT_GT(got.counters.n_prefix_hits, 0);
}

TEST_P(BatchInvariance, FullyCachedPromptRecomputesOnlyItsLastToken) {
  const auto prompt = make_prompt(32, 8);  // 4 blocks of 8
  std::vector<Arrival> arrivals = {
      {"first", prompt, greedy(3), 0}, {"again", prompt, greedy(3), 10}, {"longer", make_prompt(45, 8), greedy(3), 20}};
  arrivals[2].prompt.assign(prompt.begin(), prompt.end());
  for (int t : {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}) arrivals[2].prompt.push_back(t);
  const RunResult solo = solo_runs(arrivals, GetParam());
  auto steps = std::make_shared<FakeRunner::StepLog>();
  auto got = run_engine(fake(8, 32, GgmlType::F16, steps), config(GetParam(), 2048, true), arrivals);
  expect_same(solo, got, "fully cached");
  EXPECT_EQ(got.n_cached["first"], 0);
  EXPECT_EQ(got.n_cached["again"], 31);
  EXPECT_EQ(got.n_cached["longer"], 32);
  // Forward calls: "first" 32 + 2 decodes; "again" recomputes 1 token + 2 decodes; "longer"
  // computes its 13 new tokens + 2 decodes.
  ASSERT_EQ(steps->size(), 9u);
  EXPECT_EQ((*steps)[0].query_lens, std::vector<int>{32});
  EXPECT_EQ((*steps)[3].query_lens, std::vector<int>{1});
  EXPECT_EQ((*steps)[6].query_lens, std::vector<int>{13});
}

INSTANTIATE_TEST_SUITE_P(FixedPath, BatchInvariance, ::testing::Values(MlaPathPolicy::Mha, MlaPathPolicy::Mqa),
                         [](const auto& info) { return std::string(mla_path_policy_name(info.param)); });

TEST(Engine, AutoPathMatchesFixedPathTokensAndLogitsWithinTolerance) {
  const auto arrivals = mixed_arrivals(6);
  const RunResult mha = solo_runs(arrivals, MlaPathPolicy::Mha);
  auto got = run_engine(fake(16, 64), config(MlaPathPolicy::Auto, 16, true), arrivals);
  for (const auto& [id, seqs] : mha.seqs) {
    EXPECT_EQ(got.seqs[id][0].tokens, seqs[0].tokens) << id;
    for (const auto& [pos, row] : mha.logits.at(id))
      for (size_t v = 0; v < row.size(); ++v)
        ASSERT_NEAR(got.logits[id][pos][v], row[v], 1e-5 * std::max(1.0f, std::fabs(row[v])))
            << id << " " << pos << " " << v;
  }
  EXPECT_GT(got.counters.n_tokens_mqa, 0);
  EXPECT_GT(got.counters.n_tokens_mha, 0);
}

TEST(Engine, OneTokenPromptIsScheduledLikeADecode) {
  auto steps = std::make_shared<FakeRunner::StepLog>();
  auto r = run_engine(fake(16, 8, GgmlType::F16, steps), config(MlaPathPolicy::Auto, 2048, true),
                      {{"h", {17}, greedy(2), 0}});
  ASSERT_EQ((*steps).size(), 2u);
  for (const auto& s : (*steps)) {
    EXPECT_EQ(s.query_lens, std::vector<int>{1});
    EXPECT_EQ(s.paths, std::vector<MlaPath>{MlaPath::Mqa});
    EXPECT_EQ(s.n_logit_rows, 1);
  }
  EXPECT_EQ(r.counters.n_tokens_mqa, 2);
  EXPECT_EQ(r.counters.n_tokens_mha, 0);
}

TEST(Engine, StepsRespectBudgetAndSeqCapAndComputeLogitsOnlyForSampledRows) {
  auto steps = std::make_shared<FakeRunner::StepLog>();
  auto cfg = config(MlaPathPolicy::Auto, 16, false);
  cfg.max_num_seqs = 3;
  auto arrivals = mixed_arrivals(5);
  run_engine(fake(16, 64, GgmlType::F16, steps), cfg, arrivals);
  bool saw_mixed = false;
  for (const auto& s : (*steps)) {
    EXPECT_LE(s.n_tokens, 16);
    EXPECT_LE(s.n_seqs, 3);
    int n_decodes = 0, n_chunks = 0;
    for (int q : s.query_lens) (q == 1 ? n_decodes : n_chunks)++;
    EXPECT_LE(s.n_logit_rows, s.n_seqs);
    EXPECT_GE(s.n_logit_rows, n_decodes);
    if (n_decodes > 0 && n_chunks > 0) saw_mixed = true;
  }
  EXPECT_TRUE(saw_mixed);
  // Prompts of 40 and 64 tokens need chunks: some step has a chunk that yields no logits.
  bool saw_chunk_without_logits = false;
  for (const auto& s : (*steps)) {
    if (s.n_logit_rows < s.n_seqs) saw_chunk_without_logits = true;
  }
  EXPECT_TRUE(saw_chunk_without_logits);
}

TEST(Engine, NSequencesShareThePromptBlocks) {
  // 40-token prompt, blocks of 16: 2 full + 1 partial. After the fork the three sequences hold
  // the 2 full blocks together and one partial block each (copy-on-write): 5 blocks, not 9.
  auto params = greedy(3);
  params.n = 3;
  std::vector<int64_t> free_after;
  auto r = run_engine(fake(16, 32), config(MlaPathPolicy::Auto, 2048, false), {{"n3", make_prompt(40, 3), params, 0}},
                      nullptr, nullptr, [&](Engine& e) { free_after.push_back(e.kv().pool().n_free()); });
  ASSERT_GE(free_after.size(), 2u);
  EXPECT_EQ(32 - free_after[0], 3);  // prompt computed and forked: shared
  EXPECT_EQ(32 - free_after[1], 5);  // one decode each: partial block copied twice
  ASSERT_EQ(r.seqs["n3"].size(), 3u);
  auto solo =
      run_engine(fake(16, 32), config(MlaPathPolicy::Auto, 2048, false), {{"n1", make_prompt(40, 3), greedy(3), 0}});
  for (const auto& s : r.seqs["n3"]) {
    EXPECT_EQ(s.tokens, solo.seqs["n1"][0].tokens);  // greedy: all the same
    EXPECT_EQ(s.finish, FinishReason::kLength);
  }
}

TEST(Engine, SeededSamplingIsReproducibleWhateverElseRuns) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.9f;
  p.seed = 1234;
  p.max_tokens = 12;
  p.n = 2;
  Arrival a{"seeded", make_prompt(10, 9), p, 0};
  auto alone = run_engine(fake(16, 64), config(MlaPathPolicy::Mha, 2048, true), {a});
  auto others = mixed_arrivals(8);
  a.at_step = 4;
  others.push_back(a);
  auto busy = run_engine(fake(16, 64), config(MlaPathPolicy::Mha, 16, true), others);
  ASSERT_EQ(alone.seqs["seeded"].size(), 2u);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(alone.seqs["seeded"][i].tokens, busy.seqs["seeded"][i].tokens) << i;
  EXPECT_NE(alone.seqs["seeded"][0].tokens, alone.seqs["seeded"][1].tokens);
}

TEST(Engine, AbortFreesBlocksAndEndsWithAbort) {
  auto arrivals = mixed_arrivals(30);
  auto r = run_engine(fake(16, 64), config(MlaPathPolicy::Auto, 16, true), arrivals, nullptr, [](int step, Engine& e) {
    if (step == 10) {
      EXPECT_TRUE(e.abort("r3"));
    }  // running
    if (step == 11) {
      EXPECT_FALSE(e.abort("nope"));
    }
    if (step == 12) {
      EXPECT_FALSE(e.abort("r7"));
    }  // arrives at 13
    if (step == 13) {
      EXPECT_TRUE(e.abort("r7"));
    }  // never scheduled
  });
  EXPECT_EQ(r.seqs["r3"][0].finish, FinishReason::kAbort);
  EXPECT_EQ(r.seqs["r7"][0].finish, FinishReason::kAbort);
  EXPECT_EQ(r.seqs["r0"][0].finish, FinishReason::kLength);
}

TEST(Engine, RejectsBadRequestsWithAClearError) {
  EngineConfig cfg = config(MlaPathPolicy::Auto, 64, true);
  Engine e(std::make_unique<FakeRunner>(kVocab, 16, 4), cfg);  // 64 tokens of KV
  EXPECT_EQ(e.config().max_model_len, 64);
  auto expect_error = [&](std::vector<int32_t> prompt, SamplingParams p, const char* needle) {
    try {
      e.add_request("x", std::move(prompt), p);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find(needle), std::string::npos) << err.what();
    }
  };
  expect_error({}, greedy(1), "no tokens");
  expect_error({1, 2, kVocab}, greedy(1), "out of range");
  expect_error(make_prompt(64, 1), greedy(1), "limit is 63");
  SamplingParams bad = greedy(1);
  bad.temperature = -1;
  expect_error({1}, bad, "temperature");
  e.add_request("dup", {1, 2}, greedy(1));
  try {
    e.add_request("dup", {1, 2}, greedy(1));
    ADD_FAILURE();
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("already in use"), std::string::npos);
  }
  e.run_until_idle();
  e.add_request("dup", {1, 2}, greedy(1));  // free again once finished
  e.run_until_idle();
}

TEST(Engine, StopsAtMaxModelLength) {
  auto cfg = config(MlaPathPolicy::Auto, 64, true);
  cfg.max_model_len = 20;
  auto r = run_engine(fake(16, 8), cfg, {{"long", make_prompt(15, 2), greedy(100), 0}});
  EXPECT_EQ(r.seqs["long"][0].tokens.size(), 5u);
  EXPECT_EQ(r.seqs["long"][0].finish, FinishReason::kLength);
}

// Token t is the letter 'a' + t % 26.
class LetterDecoder : public TextDecoder {
  struct Inc : IncrementalDecoder {
    std::string push(int32_t t) override { return std::string(1, static_cast<char>('a' + t % 26)); }
    std::string flush() override { return ""; }
  };

 public:
  std::unique_ptr<IncrementalDecoder> start(std::span<const int32_t>, bool) const override {
    return std::make_unique<Inc>();
  }
};

TEST(Engine, TextStopStringsStopTokensAndEos) {
  auto dec = std::make_shared<LetterDecoder>();
  Arrival a{"t", make_prompt(12, 4), greedy(16), 0};
  auto base = run_engine(fake(16, 16), config(MlaPathPolicy::Auto, 64, true), {a}, dec);
  const auto& seq = base.seqs["t"][0];
  ASSERT_EQ(seq.text.size(), 16u);
  // Stop at the text of tokens 5..6.
  Arrival s = a;
  s.params.stop = {seq.text.substr(5, 2)};
  auto stopped = run_engine(fake(16, 16), config(MlaPathPolicy::Auto, 64, true), {s}, dec);
  const size_t cut = seq.text.find(s.params.stop[0]);
  EXPECT_EQ(stopped.seqs["t"][0].text, seq.text.substr(0, cut));
  EXPECT_EQ(std::get<std::string>(stopped.seqs["t"][0].stop_reason), s.params.stop[0]);
  // EOS = the 4th generated token.
  auto cfg = config(MlaPathPolicy::Auto, 64, true);
  cfg.eos_token_ids = {seq.tokens[3]};
  const size_t first = std::find(seq.tokens.begin(), seq.tokens.end(), seq.tokens[3]) - seq.tokens.begin();
  auto eos = run_engine(fake(16, 16), cfg, {a}, dec);
  EXPECT_EQ(eos.seqs["t"][0].tokens.size(), first + 1);
  EXPECT_EQ(eos.seqs["t"][0].text, seq.text.substr(0, first));
  EXPECT_EQ(eos.seqs["t"][0].finish, FinishReason::kStop);
  // The same token as a stop token id: stop_reason is the id.
  Arrival st = a;
  st.params.stop_token_ids = {seq.tokens[3]};
  auto by_id = run_engine(fake(16, 16), config(MlaPathPolicy::Auto, 64, true), {st}, dec);
  EXPECT_EQ(std::get<int32_t>(by_id.seqs["t"][0].stop_reason), seq.tokens[3]);
  // logprobs: one entry per token, the sampled token's logprob is the top one (greedy).
  Arrival lp = a;
  lp.params.logprobs = 3;
  auto with_lp = run_engine(fake(16, 16), config(MlaPathPolicy::Auto, 64, true), {lp}, dec);
  ASSERT_EQ(with_lp.seqs["t"][0].logprobs.size(), 16u);
  for (const auto& l : with_lp.seqs["t"][0].logprobs) {
    ASSERT_EQ(l.top.size(), 3u);
    EXPECT_EQ(l.top[0].token, l.sampled.token);
    EXPECT_GE(l.top[0].logprob, l.top[1].logprob);
  }
}

TEST(Engine, ThreadSafeAddAbortAndStreamsWithTheLoopOnItsOwnThread) {
  const auto arrivals = mixed_arrivals(10);
  const RunResult solo = solo_runs(arrivals, MlaPathPolicy::Mha);
  EngineConfig cfg = config(MlaPathPolicy::Mha, 16, true);
  Engine engine(std::make_unique<FakeRunner>(kVocab, 16, 64), cfg);
  engine.start();
  std::vector<std::thread> threads;
  std::vector<std::vector<int32_t>> tokens(arrivals.size());
  for (size_t i = 0; i < arrivals.size(); ++i) {
    threads.emplace_back([&, i] {
      auto stream = engine.add_request(arrivals[i].id, arrivals[i].prompt, arrivals[i].params);
      RequestOutput out;
      while (stream->next(out))
        for (const auto& o : out.outputs) tokens[i].insert(tokens[i].end(), o.token_ids.begin(), o.token_ids.end());
    });
  }
  // One more request, aborted from another thread while it runs.
  auto victim = engine.add_request("victim", make_prompt(30, 5), greedy(1000));
  std::thread aborter([&] {
    RequestOutput out;
    ASSERT_TRUE(victim->next(out));
    engine.abort("victim");
  });
  for (auto& t : threads) t.join();
  aborter.join();
  RequestOutput last;
  while (victim->next(last)) {
  }
  ASSERT_FALSE(last.outputs.empty());
  EXPECT_EQ(last.outputs[0].finish_reason, FinishReason::kAbort);
  for (size_t i = 0; i < arrivals.size(); ++i)
    EXPECT_EQ(tokens[i], solo.seqs.at(arrivals[i].id)[0].tokens) << arrivals[i].id;
  engine.stop();
  EXPECT_FALSE(engine.has_unfinished());
  EXPECT_EQ(engine.kv().pool().n_free(), engine.kv().pool().n_blocks());
  auto c = engine.counters();
  EXPECT_EQ(c.n_running, 0);
  EXPECT_EQ(c.n_waiting, 0);
  EXPECT_EQ(c.n_requests_finished, 9);
  EXPECT_EQ(c.n_finished_abort, 1);
  EXPECT_EQ(c.n_finished_stop + c.n_finished_length, 8);
  EXPECT_EQ(c.n_finished_error, 0);
}

// The finish reasons are counted with the gauges, before the last output is delivered: whoever
// sees a request's end (its callback, or a reader of the counters that sees it gone from the
// running set) sees its reason counted.
TEST(Engine, FinishReasonsAreCountedBeforeTheLastOutput) {
  Engine engine(std::make_unique<FakeRunner>(kVocab, 16, 8), config(MlaPathPolicy::Auto, 64, true));
  std::mutex mu;
  std::condition_variable cv;
  std::vector<EngineCounters> at_end;
  // "short" ends by length after 3 tokens; its callback aborts "long", which ends a step later.
  auto on_output = [&](RequestOutput&& out) {
    if (!out.finished) return;
    if (out.request_id == "short") EXPECT_TRUE(engine.abort("long"));
    std::lock_guard lk(mu);
    at_end.push_back(engine.counters());
    cv.notify_all();
  };
  engine.add_request("long", make_prompt(12, 3), greedy(100), on_output);
  engine.add_request("short", make_prompt(12, 4), greedy(3), on_output);
  engine.start();  // after both are queued: they are admitted in the same step
  std::unique_lock lk(mu);
  cv.wait(lk, [&] { return at_end.size() == 2; });
  EXPECT_EQ(at_end[0].n_finished_length, 1);
  EXPECT_EQ(at_end[0].n_finished_abort, 0);
  EXPECT_EQ(at_end[1].n_finished_length, 1);
  EXPECT_EQ(at_end[1].n_finished_abort, 1);
  EXPECT_EQ(at_end[1].n_running, 0);
  lk.unlock();
  engine.stop();
}

TEST(Engine, DestructorAbortsWhatIsStillActive) {
  std::shared_ptr<RequestStream> s;
  {
    Engine e(std::make_unique<FakeRunner>(kVocab, 16, 8), config(MlaPathPolicy::Auto, 64, true));
    s = e.add_request("left", {1, 2, 3}, greedy(50));
    e.step();
  }
  RequestOutput out, last;
  while (s->next(out)) last = out;
  EXPECT_TRUE(last.finished);
  EXPECT_EQ(last.outputs.back().finish_reason, FinishReason::kAbort);
}

}  // namespace
}  // namespace mla::testing
