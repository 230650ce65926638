// The engine on the real deepseek2 forward (a synth model and the reference fixture model):
// batch invariance of greedy tokens and logits (alone vs 7 other requests arriving at different
// steps, token budgets 8/16/64/2048, with and without prefix hits, after preemption), `auto`
// against the fixed paths, the KV cache dtypes, and the dispatch trace lines.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "../model/model_test_util.h"
#include "../support/log_capture.h"
#include "../support/model_engine.h"
#include "engine_harness.h"
#include "util/log.h"
#include "util/trace.h"

namespace mla::testing {
namespace {

using testing::CaptureLog;
using testing::count_occurrences;

const std::string kFixtureModel =
    std::string(MLA_SOURCE_DIR) + "/tests/fixtures/reference/deepseek-v3-tiny/model-f32.gguf";

std::string synth_q8_model() {
  SynthSpec s;
  s.type = GgmlType::Q8_0;
  s.seed = 21;
  s.n_embd = 64;
  s.n_ff = 128;
  s.q_lora_rank = 32;
  s.kv_lora_rank = 48;  // latent row 48 + 16 = 64: a Q8_0 cache works
  s.qk_nope = 16;
  s.qk_rope = 16;
  s.v_head = 16;
  s.n_ff_exp = 32;
  s.n_vocab = 256;
  return synth_file("engine_q8", s);
}

std::function<std::unique_ptr<ModelRunner>()> model_runner(const std::string& path, MlaPathPolicy policy,
                                                           int block_size, int64_t tokens,
                                                           GgmlType dtype = GgmlType::F16, bool exact = true) {
  return deepseek2_runner(path, policy,
                          {.block_size = block_size, .tokens = tokens, .dtype = dtype, .exact_attention = exact});
}

std::vector<int32_t> prompt_of(int n, int seed, int n_vocab) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(static_cast<int32_t>((seed * 131 + i * 71 + i * i * 7) % n_vocab));
  return p;
}

std::vector<Arrival> arrivals(int n_vocab) {
  const int lens[] = {1, 3, 9, 20, 5, 33, 7, 14};
  const int at[] = {0, 0, 1, 2, 3, 5, 8, 13};
  std::vector<Arrival> a;
  for (int i = 0; i < 8; ++i)
    a.push_back({"q" + std::to_string(i), prompt_of(lens[i], i + 1, n_vocab), greedy(3 + i % 3), at[i]});
  // Two more that share q5's first 32 tokens: prefix-cache hits when they arrive.
  a.push_back({"hit1", a[5].prompt, greedy(3), 20});
  a.back().prompt.resize(32);
  a.back().prompt.push_back(7);
  a.push_back({"hit2", a[5].prompt, greedy(4), 24});
  return a;
}

void expect_bit_identical(const RunResult& want, const RunResult& got, const std::string& what) {
  for (const auto& [id, seqs] : want.seqs) {
    ASSERT_TRUE(got.seqs.count(id)) << what << " " << id;
    EXPECT_EQ(got.seqs.at(id)[0].tokens, seqs[0].tokens) << what << ": tokens of " << id;
    for (const auto& [pos, row] : want.logits.at(id)) {
      const auto& g = got.logits.at(id).at(pos);
      ASSERT_EQ(0, std::memcmp(row.data(), g.data(), row.size() * sizeof(float)))
          << what << ": logits of " << id << " at position " << pos;
    }
  }
}

struct Case {
  std::string name;
  MlaPathPolicy policy;
  bool exact = true;  // the attention kernels: exact, or F32 (--attention-precision f32)
};

class ModelBatchInvariance : public ::testing::TestWithParam<Case> {
 protected:
  std::string path() const { return GetParam().name == "synth_q8" ? synth_q8_model() : kFixtureModel; }
};

TEST_P(ModelBatchInvariance, AloneEqualsBatchedAcrossBudgetsPrefixHitsAndPreemption) {
  const MlaPathPolicy policy = GetParam().policy;
  const bool exact = GetParam().exact;
  const std::string file = path();
  const int n_vocab = static_cast<int>(load_deepseek2(file, {})->config.n_vocab);
  const auto all = arrivals(n_vocab);

  RunResult solo;
  for (auto a : all) {
    a.at_step = 0;
    auto r = run_engine(model_runner(file, policy, 16, 256, GgmlType::F16, exact), config(policy, 2048, false), {a});
    solo.seqs[a.id] = r.seqs[a.id];
    solo.logits[a.id] = r.logits[a.id];
  }
  for (int budget : {8, 16, 64, 2048}) {
    for (bool prefix : {false, true}) {
      if (budget == 2048 && !prefix) continue;  // covered by the solo runs' configuration
      auto got =
          run_engine(model_runner(file, policy, 16, 256, GgmlType::F16, exact), config(policy, budget, prefix), all);
      expect_bit_identical(solo, got, "budget " + std::to_string(budget) + (prefix ? " prefix" : ""));
      if (prefix) {
        EXPECT_GT(got.counters.n_prefix_hits, 0);
      }
    }
  }
  // 6 blocks of 8 tokens for ten requests (the longest needs 5): preemption and recomputation.
  auto tight = run_engine(model_runner(file, policy, 8, 48, GgmlType::F16, exact), config(policy, 16, true), all);
  expect_bit_identical(solo, tight, "preemption");
  EXPECT_GT(tight.counters.n_preemptions, 0);
}

INSTANTIATE_TEST_SUITE_P(Models, ModelBatchInvariance,
                         // With the F32 kernels the MLA paths differ in the last bits, so under `auto`
                         // the bits hold only because a token's path follows its phase (prompt or
                         // generated), not its chunk's length, and generated blocks stay out of the
                         // prefix cache.
                         ::testing::Values(Case{"synth_q8", MlaPathPolicy::Mha}, Case{"synth_q8", MlaPathPolicy::Mqa},
                                           Case{"fixture_v3", MlaPathPolicy::Mha},
                                           Case{"fixture_v3", MlaPathPolicy::Mqa},
                                           Case{"synth_q8", MlaPathPolicy::Auto, false},
                                           Case{"fixture_v3", MlaPathPolicy::Auto, false},
                                           Case{"fixture_v3", MlaPathPolicy::Mqa, false}),
                         [](const auto& info) {
                           return info.param.name + "_" + std::string(mla_path_policy_name(info.param.policy)) +
                                  (info.param.exact ? "" : "_f32");
                         });

// With the F32 kernels a generated token's row (MQA) is not the row its token gets as part of a
// prompt (the prefill path): a later prompt that repeats a reply (a chat's next turn) must compute
// those tokens as a prompt, not take the reply's rows from the prefix cache. The prompt's own blocks
// still hit.
TEST(ModelEngine, F32PromptRepeatingAReplyGivesItsOwnBits) {
  const int n_vocab = static_cast<int>(load_deepseek2(kFixtureModel, {})->config.n_vocab);
  const auto runner = model_runner(kFixtureModel, MlaPathPolicy::Auto, 16, 256, GgmlType::F16, false);
  const Arrival first{"a", prompt_of(18, 3, n_vocab), greedy(30), 0};
  const auto reply = run_engine(runner, config(MlaPathPolicy::Auto, 2048, true), {first}).seqs.at("a")[0].tokens;
  ASSERT_EQ(reply.size(), 30u);
  Arrival next{"b", first.prompt, greedy(3), 0};
  next.prompt.insert(next.prompt.end(), reply.begin(), reply.end());  // positions 16..31: a block of the reply
  next.prompt.push_back(7);
  const RunResult alone = run_engine(runner, config(MlaPathPolicy::Auto, 2048, true), {next});
  next.at_step = 40;  // after the first request has finished and its blocks are cached
  const RunResult after = run_engine(runner, config(MlaPathPolicy::Auto, 2048, true), {first, next});
  EXPECT_GT(after.counters.n_prefix_hits, 0);
  RunResult want;
  want.seqs["b"] = alone.seqs.at("b");
  want.logits["b"] = alone.logits.at("b");
  expect_bit_identical(want, after, "a prompt repeating a reply");
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    ref = std::max(ref, static_cast<double>(std::fabs(b[i])));
  }
  return diff / ref;
}

TEST(ModelEngine, AutoMatchesFixedPathTokensAndLogitsWithin1e5) {
  // F32 cache: the two paths differ only in their own rounding, not in the cache's.
  const auto all = arrivals(512);
  auto mha = run_engine(model_runner(kFixtureModel, MlaPathPolicy::Auto, 16, 512, GgmlType::F32),
                        config(MlaPathPolicy::Mha, 16, true), all);
  auto aut = run_engine(model_runner(kFixtureModel, MlaPathPolicy::Auto, 16, 512, GgmlType::F32),
                        config(MlaPathPolicy::Auto, 16, true), all);
  // Decode rows go down MQA; prompt chunks down the path cheaper_prefill_path() gives these widths.
  const MlaPath prefill =
      model_runner(kFixtureModel, MlaPathPolicy::Auto, 16, 512, GgmlType::F32)()->auto_prefill_path();
  EXPECT_GT(aut.counters.n_tokens_mqa, 0);
  EXPECT_EQ(aut.counters.n_tokens_mha > 0, prefill == MlaPath::Mha);
  for (const auto& [id, seqs] : mha.seqs) {
    EXPECT_EQ(aut.seqs[id][0].tokens, seqs[0].tokens) << id;
    for (const auto& [pos, row] : mha.logits.at(id))
      EXPECT_LE(max_rel_diff(aut.logits[id][pos], row), 1e-5) << id << " position " << pos;
  }
}

// Weights loaded for one path (only its W_UK form derived) and an engine whose steps take another:
// refused when the engine is built, naming both, not at the first step in the attention.
TEST(ModelEngine, APathPolicyTheWeightsCannotRunIsRefusedAtBuild) {
  for (const MlaPathPolicy loaded : {MlaPathPolicy::Mha, MlaPathPolicy::Mqa}) {
    for (const MlaPathPolicy step : {MlaPathPolicy::Auto, MlaPathPolicy::Mha, MlaPathPolicy::Mqa}) {
      std::unique_ptr<ModelRunner> runner = model_runner(kFixtureModel, loaded, 16, 64)();
      EXPECT_EQ(runner->loaded_path_policy(), loaded);
      if (step == loaded) {
        EXPECT_NO_THROW(Engine(std::move(runner), config(step, 16, true)));
        continue;
      }
      try {
        Engine e(std::move(runner), config(step, 16, true));
        ADD_FAILURE() << "loaded for " << mla_path_policy_name(loaded) << ", engine " << mla_path_policy_name(step)
                      << " accepted";
      } catch (const Error& e) {
        const std::string want = fmt::format(
            "engine: mla path {} needs weights the model did not load: it was "
            "loaded for mla path {} only",
            mla_path_policy_name(step), mla_path_policy_name(loaded));
        EXPECT_EQ(std::string(e.what()), want);
      }
    }
  }
  // Both forms (the runner's `auto`): every policy runs.
  for (const MlaPathPolicy step : {MlaPathPolicy::Auto, MlaPathPolicy::Mha, MlaPathPolicy::Mqa})
    EXPECT_NO_THROW(Engine(model_runner(kFixtureModel, MlaPathPolicy::Auto, 16, 64)(), config(step, 16, true)));
}

// The relative rounding error of one value stored in a cache row of this type: F16 keeps 11
// significant bits (unit roundoff 2^-11), BF16 8 (2^-8); Q8_0 rounds to steps of 1/127 of its
// block's largest magnitude (at most half a step, 1/254, relative to that magnitude).
double cache_rounding_unit(GgmlType t) {
  switch (t) {
    case GgmlType::F16:
      return std::ldexp(1.0, -11);
    case GgmlType::BF16:
      return std::ldexp(1.0, -8);
    case GgmlType::Q8_0:
      return 1.0 / 254;
    default:
      return 0;
  }
}

TEST(ModelEngine, CacheDtypesRunAndF32MatchesTheDirectForward) {
  struct DtypeCase {
    std::string file;
    int n_vocab;
    std::vector<GgmlType> dtypes;
  };
  // The fixture's latent row (64 + 16) is not a multiple of 32, the synth's (48 + 16) is.
  for (const DtypeCase& dc : {DtypeCase{kFixtureModel, 512, {GgmlType::F32, GgmlType::F16, GgmlType::BF16}},
                              DtypeCase{synth_q8_model(), 256, {GgmlType::F32, GgmlType::Q8_0}}}) {
    const std::vector<int32_t> prompt = prompt_of(12, 3, dc.n_vocab);
    // The model's own single-sequence path (slot = position, F32 cache, no engine).
    const auto direct = run_logits(dc.file, MlaPathPolicy::Mha, prompt, 3);
    for (GgmlType dtype : dc.dtypes) {
      auto cfg = config(MlaPathPolicy::Mha, 5, true);
      cfg.all_logits = true;
      auto r = run_engine(model_runner(dc.file, MlaPathPolicy::Mha, 4, 64, dtype), cfg, {{"d", prompt, greedy(4), 0}});
      std::vector<float> got;
      for (const auto& [pos, row] : r.logits["d"]) got.insert(got.end(), row.begin(), row.end());
      ASSERT_EQ(got.size(), direct.size()) << ggml_type_name(dtype);
      if (dtype == GgmlType::F32) {
        EXPECT_EQ(got, direct);  // chunks of 5, blocks of 4: still bit-identical
        continue;
      }
      // Rounded cache rows: the prompt's logits are close to the F32 ones, not equal.
      const size_t n = prompt.size() * dc.n_vocab;
      std::vector<float> g(got.begin(), got.begin() + n), d(direct.begin(), direct.begin() + n);
      // Each cached value is rounded once. For F16 and BF16 the logits then move by less than one
      // rounding unit (0.73 and 0.68 of it when this was written): allow 2, so a cache that kept
      // fewer bits than its type (BF16's 8 in place of F16's 11 is 8 units) fails. Q8_0's unit
      // is relative to a block's largest value, so its smaller values lose more (5.8 units
      // measured): allow 8.
      const double u = cache_rounding_unit(dtype);
      const double rel = max_rel_diff(g, d);
      EXPECT_LE(rel, (dtype == GgmlType::Q8_0 ? 8 : 2) * u) << ggml_type_name(dtype) << ": " << rel / u << " units";
      EXPECT_NE(g, d) << ggml_type_name(dtype);
    }
  }
}

// A synth model with DeepSeek's 102400-token vocabulary, where "Hello" is one token.
std::string deepseek_vocab_model() {
  SynthSpec s;
  s.type = GgmlType::Q8_0;
  s.seed = 3;
  s.n_embd = 64;
  s.n_ff = 64;
  s.q_lora_rank = 32;
  s.kv_lora_rank = 32;
  s.qk_nope = 16;
  s.qk_rope = 16;
  s.v_head = 16;
  s.n_ff_exp = 32;
  s.vocab_path = std::string(MLA_SOURCE_DIR) + "/tests/fixtures/vocab/ggml-vocab-deepseek-llm.gguf";
  return synth_file("engine_dsvocab", s);
}

TEST(ModelEngine, DispatchTraceForTheHelloProbeAndAMixedBatch) {
  const std::string file = deepseek_vocab_model();
  // The id of "Hello" from the vocabulary itself.
  int32_t hello = -1;
  {
    auto f = GgufFile::open(file);
    auto tokens = f->get_strings("tokenizer.ggml.tokens");
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] == "Hello") hello = static_cast<int32_t>(i);
  }
  ASSERT_GE(hello, 0);
  auto runner = model_runner(file, MlaPathPolicy::Auto, 16, 256)();
  const bool prefill_mqa = runner->auto_prefill_path() == MlaPath::Mqa;
  Engine engine(std::move(runner), config(MlaPathPolicy::Auto, 8, true));
  {
    trace_configure("dispatch:1");
    CaptureLog cap;
    engine.add_request("hello", {hello}, greedy(2));
    engine.step();
    const std::string t = cap.text();
    EXPECT_EQ(count_occurrences(t, "dispatch layer=blk.0 is_sparse=0 num_mqa=1 num_mha=0 total_toks=1 policy=auto"), 1)
        << t;
    EXPECT_EQ(count_occurrences(t, "dispatch layer=blk.1 is_sparse=0 num_mqa=1 num_mha=0 total_toks=1 policy=auto"), 1)
        << t;
    engine.step();
    EXPECT_EQ(count_occurrences(cap.text(), "dispatch layer="), 2);  // N = 1 call per layer
  }
  engine.run_until_idle();
  // Three sequences decoding and one prompt chunk in one step (budget 8: 3 decodes + 5 tokens).
  engine.add_request("d1", {hello}, greedy(4));
  engine.add_request("d2", {5, 6}, greedy(4));
  engine.add_request("d3", {hello, 9, 10}, greedy(4));
  engine.step();  // three prompts
  engine.add_request("long", prompt_of(20, 5, 1000), greedy(2));
  trace_configure("dispatch:1");
  {
    CaptureLog cap;
    engine.step();
    // The prompt chunk takes the model's auto prefill path.
    const std::string want = prefill_mqa ? "num_mqa=4 num_mha=0" : "num_mqa=3 num_mha=1";
    EXPECT_EQ(count_occurrences(cap.text(), "dispatch layer=blk.0 is_sparse=0 " + want + " total_toks=8 policy=auto"),
              1)
        << cap.text();
  }
  trace_reset();
  engine.run_until_idle();
  EXPECT_EQ(engine.kv().pool().n_free(), engine.kv().pool().n_blocks());
}

// The engine's path counters are the tokens the model sent down each path, after its own
// overrides. Under auto a sparse (DSA) layer weighs both paths for the selection at hand
// (Deepseek2Model::sparse_path), which here disagrees with the query-length rule both ways: a
// 1-token prompt (context 1) costs less down MHA, a 20-token prefill too, while decodes over 21+
// rows cost less down MQA. The trace lines of blk.0 and the model's per-layer counts agree.
TEST(ModelEngine, PathCountersAreWhatTheModelSentThroughSparseLayers) {
  SynthSpec s = small_spec();
  s.arch = "glm-dsa";
  s.n_layer = 3;
  s.n_indexer_head = 4;
  s.indexer_head_dim = 16;
  s.indexer_top_k = 6;
  s.seed = 21;
  Engine engine(model_runner(synth_file("engine_dsa_paths", s), MlaPathPolicy::Auto, 16, 256)(),
                config(MlaPathPolicy::Auto, 64, false));
  const auto& runner = static_cast<const Deepseek2Runner&>(engine.runner());
  const DeepseekConfig& c = runner.config();
  ASSERT_TRUE(c.has_indexer);
  // The cost rule's terms (per head): MHA decompresses every context row, MQA absorbs per query.
  const int64_t proj = (c.qk_nope + c.v_head) * c.kv_lora_rank;
  const int64_t mha_row = c.qk_head + c.v_head, mqa_row = 2 * c.kv_lora_rank + c.qk_rope;
  ASSERT_LT(mha_row, mqa_row);                             // as many queries as rows (prompts): MHA
  ASSERT_GT(21 * proj + 6 * mha_row, proj + 6 * mqa_row);  // 1 query, 21+ rows (6 selected): MQA
  trace_configure("dispatch:100");
  CaptureLog cap;
  engine.add_request("one", {7}, greedy(1));  // one forward: the 1-token prompt
  engine.run_until_idle();
  EXPECT_EQ(engine.counters().n_tokens_mha, 1);  // the query-length rule alone would have said MQA
  EXPECT_EQ(engine.counters().n_tokens_mqa, 0);
  engine.add_request("long", prompt_of(20, 3, static_cast<int>(c.n_vocab)), greedy(6));  // prefill + 5 decodes
  engine.run_until_idle();
  const std::string t = cap.text();
  trace_reset();
  const EngineCounters k = engine.counters();
  EXPECT_EQ(k.n_tokens_mha, 1 + 20);
  EXPECT_EQ(k.n_tokens_mqa, 5);
  const PathCounters& pc = runner.path_counters();
  EXPECT_EQ(pc.sparse_layer_tokens_mha.load(), k.n_tokens_mha * c.n_layer);
  EXPECT_EQ(pc.sparse_layer_tokens_mqa.load(), k.n_tokens_mqa * c.n_layer);
  EXPECT_EQ(pc.dense_layer_tokens_mha.load() + pc.dense_layer_tokens_mqa.load(), 0);
  // The trace of blk.0, one sequence per step: its tokens by the path the line names.
  int64_t traced_mha = 0, traced_mqa = 0;
  std::istringstream lines(t);
  for (std::string line; std::getline(lines, line);) {
    const auto at = line.find("dispatch layer=blk.0 is_sparse=1 ");
    if (at == std::string::npos) continue;
    int mqa = 0, mha = 0, toks = 0;
    ASSERT_EQ(std::sscanf(line.c_str() + at, "dispatch layer=blk.0 is_sparse=1 num_mqa=%d num_mha=%d total_toks=%d",
                          &mqa, &mha, &toks),
              3)
        << line;
    (mqa ? traced_mqa : traced_mha) += toks;
  }
  EXPECT_EQ(traced_mha, k.n_tokens_mha) << t;
  EXPECT_EQ(traced_mqa, k.n_tokens_mqa) << t;
}

}  // namespace
}  // namespace mla::testing
