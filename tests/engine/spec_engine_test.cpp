// Speculative decoding with the tiny model's MTP layer (issue 13): greedy tokens and the logits
// they come from are those of decoding without it, bit for bit, for K = 1..4, batch mixes
// (prompts arriving mid-run, chunked prefills, prefix-cache hits, n = 2, preemption) and every
// MLA path policy; stops inside an accepted run cut where they would without speculation;
// sampled first and second tokens follow the non-speculative distribution (chi-square); bad
// configurations are refused with one line.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "../support/log_capture.h"
#include "../support/model_engine.h"
#include "engine/deepseek2_runner.h"
#include "engine/speculative.h"
#include "engine/text_decoder.h"
#include "engine_harness.h"
#include "gguf/gguf.h"
#include "kernels/moe.h"
#include "server/metrics.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/trace.h"

namespace mla::testing {
namespace {

const std::string kTiny = std::string(MLA_SOURCE_DIR) + "/models/tiny-q8_0.gguf";
constexpr int kVocab = 4096;

// max_batch_tokens: the budget plus one MTP row per sequence.
std::function<std::unique_ptr<ModelRunner>()> tiny_runner(MlaPathPolicy policy, bool mtp, int block_size = 16,
                                                          int64_t tokens = 1024) {
  return deepseek2_runner(kTiny, policy,
                          {.block_size = block_size, .tokens = tokens, .max_batch_tokens = 2048 + 128, .mtp = mtp});
}

// Token ids of held-out-like text would need the tokenizer; a spread of ids works as well.
std::vector<int32_t> prompt_of(int n, int seed) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(static_cast<int32_t>((seed * 131 + i * 71 + i * i * 7) % 2000 + 200));
  return p;
}

std::vector<Arrival> mix() {
  std::vector<Arrival> a;
  const int lens[] = {1, 6, 19, 33, 12};
  const int at[] = {0, 0, 1, 2, 4};
  const int max_tokens[] = {12, 9, 14, 10, 13};
  for (int i = 0; i < 5; ++i)
    a.push_back({"q" + std::to_string(i), prompt_of(lens[i], i + 1), greedy(max_tokens[i]), at[i]});
  // A prefix-cache hit on q3's first 32 tokens (two blocks of 16), and a request forking in two.
  a.push_back({"hit", a[3].prompt, greedy(8), 9});
  a.back().prompt.resize(32);
  a.back().prompt.push_back(77);
  a.push_back({"pair", prompt_of(7, 9), greedy(6), 3});
  a.back().params.n = 2;
  return a;
}

EngineConfig engine_config(MlaPathPolicy policy, int budget, bool prefix, int k) {
  EngineConfig c = config(policy, budget, prefix);
  c.num_speculative_tokens = k;
  return c;
}

void expect_same(const RunResult& want, const RunResult& got, const std::string& what) {
  for (const auto& [id, seqs] : want.seqs) {
    ASSERT_TRUE(got.seqs.count(id)) << what << " " << id;
    ASSERT_EQ(got.seqs.at(id).size(), seqs.size()) << what << " " << id;
    for (size_t i = 0; i < seqs.size(); ++i) {
      EXPECT_EQ(got.seqs.at(id)[i].tokens, seqs[i].tokens) << what << ": tokens of " << id << "." << i;
      EXPECT_EQ(got.seqs.at(id)[i].finish, seqs[i].finish) << what << ": finish of " << id << "." << i;
    }
    for (const auto& [pos, row] : want.logits.at(id)) {
      ASSERT_TRUE(got.logits.at(id).count(pos)) << what << ": no logits of " << id << " at " << pos;
      const auto& g = got.logits.at(id).at(pos);
      ASSERT_EQ(0, std::memcmp(row.data(), g.data(), row.size() * sizeof(float)))
          << what << ": logits of " << id << " at position " << pos;
    }
  }
  EXPECT_EQ(got.counters.n_generation_tokens, want.counters.n_generation_tokens) << what;
  EXPECT_EQ(got.counters.n_prompt_tokens, want.counters.n_prompt_tokens) << what;
}

class SpecGreedy : public ::testing::TestWithParam<MlaPathPolicy> {};

TEST_P(SpecGreedy, IdenticalToPlainDecodingForAnyKBatchMixAndPath) {
  const MlaPathPolicy policy = GetParam();
  const auto arrivals = mix();
  const RunResult plain = run_engine(tiny_runner(policy, false), engine_config(policy, 2048, true, 0), arrivals);
  ASSERT_GT(plain.counters.n_prefix_hits, 0);
  struct Variant {
    int k, budget, block_size;
    int64_t tokens;
    bool prefix;
  };
  // Budget 8: prompts in chunks beside verify rows, drafts cut to fit. 8 blocks of 8 tokens for
  // eight sequences: preemption and recomputation.
  const Variant variants[] = {{1, 2048, 16, 1024, true},
                              {2, 8, 16, 1024, true},
                              {3, 2048, 16, 1024, false},
                              {4, 16, 16, 1024, true},
                              {2, 16, 8, 64, true}};
  for (const Variant& v : variants) {
    const std::string what = "k=" + std::to_string(v.k) + " budget=" + std::to_string(v.budget) + " blocks " +
                             std::to_string(v.block_size) + "x" + std::to_string(v.tokens);
    const RunResult spec = run_engine(tiny_runner(policy, true, v.block_size, v.tokens),
                                      engine_config(policy, v.budget, v.prefix, v.k), arrivals);
    expect_same(plain, spec, what);
    EXPECT_GT(spec.counters.n_spec_draft_tokens, 0) << what;
    EXPECT_GT(spec.counters.n_spec_accepted_tokens, 0) << what;  // the trained layer's drafts do get accepted
    if (v.budget == 2048) {
      EXPECT_LT(spec.counters.n_steps, plain.counters.n_steps) << what;  // several tokens per step
    }
    if (v.tokens == 64) {
      EXPECT_GT(spec.counters.n_preemptions, 0) << what;
    }
    int64_t per_pos = 0;
    for (int64_t n : spec.counters.n_spec_accepted_per_pos) per_pos += n;
    EXPECT_EQ(per_pos, spec.counters.n_spec_accepted_tokens) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, SpecGreedy,
                         ::testing::Values(MlaPathPolicy::Mha, MlaPathPolicy::Mqa, MlaPathPolicy::Auto),
                         [](const auto& info) { return std::string(mla_path_policy_name(info.param)); });

// The DSA architectures' MTP blocks (random weights in the fixtures, with shared_head_head): the
// verify rows through sparse layers give the plain decode's tokens and logits.
class SpecDsa : public ::testing::TestWithParam<std::tuple<std::string, MlaPathPolicy>> {};

TEST_P(SpecDsa, GreedyIdenticalToPlainDecoding) {
  const auto& [name, policy] = GetParam();
  const std::string file = std::string(MLA_SOURCE_DIR) + "/tests/fixtures/dsa-reference/" + name + "/model-f32.gguf";
  auto runner = [&, policy = policy](bool mtp) {
    return deepseek2_runner(file, policy, {.max_batch_tokens = 256, .mtp = mtp});
  };
  std::vector<Arrival> a;
  const int lens[] = {3, 40, 70};
  for (int i = 0; i < 3; ++i) {
    std::vector<int32_t> p;
    for (int j = 0; j < lens[i]; ++j) p.push_back((i * 37 + j * 11 + j * j) % 500 + 5);
    a.push_back({"d" + std::to_string(i), p, greedy(10), i});
  }
  // A budget that takes every prompt whole: under `auto` a sparse layer picks a prompt chunk's path
  // by the chunk's cost, so a prompt cut differently (verify rows take budget) would take other
  // paths with or without speculation alike.
  const RunResult plain = run_engine(runner(false), engine_config(policy, 200, true, 0), a);
  const RunResult spec = run_engine(runner(true), engine_config(policy, 200, true, 3), a);
  expect_same(plain, spec, name);
  EXPECT_GT(spec.counters.n_spec_draft_tokens, 0);
  EXPECT_GT(spec.counters.n_sparse_layer_tokens, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SpecDsa,
                         ::testing::Combine(::testing::Values("glm-dsa-tiny", "deepseek32-tiny"),
                                            ::testing::Values(MlaPathPolicy::Mha, MlaPathPolicy::Mqa,
                                                              MlaPathPolicy::Auto)),
                         [](const auto& info) {
                           std::string n = std::get<0>(info.param) + "_" +
                                           std::string(mla_path_policy_name(std::get<1>(info.param)));
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

TEST(SpecEngine, StopsInsideAnAcceptedRunCutAsWithoutSpeculation) {
  auto file = GgufFile::open(kTiny);
  std::shared_ptr<const Tokenizer> tok = Tokenizer::from_gguf(*file);
  auto decoder = std::make_shared<TokenizerDecoder>(tok);
  const std::vector<int32_t> prompt = prompt_of(10, 4);
  const RunResult base =
      run_engine(tiny_runner(MlaPathPolicy::Auto, false), engine_config(MlaPathPolicy::Auto, 64, true, 0),
                 {{"b", prompt, greedy(20), 0}}, decoder);
  const std::vector<int32_t>& out = base.seqs.at("b")[0].tokens;
  const std::string text = base.seqs.at("b")[0].text;
  ASSERT_EQ(out.size(), 20u);
  std::vector<Arrival> cases;
  for (int c = 1; c <= 9; ++c) {
    Arrival a{"max" + std::to_string(c), prompt, greedy(c), 0};
    cases.push_back(a);
    a.id = "tok" + std::to_string(c);
    a.params = greedy(20);
    a.params.stop_token_ids = {out[c]};
    cases.push_back(a);
  }
  for (size_t at : {size_t{3}, text.size() / 2, text.size() - 2}) {
    Arrival a{"str" + std::to_string(at), prompt, greedy(20), 0};
    a.params.stop = {text.substr(at, 2)};
    cases.push_back(a);
  }
  Arrival eos{"eos", prompt, greedy(20), 0};
  eos.params.ignore_eos = false;
  cases.push_back(eos);
  auto cfg_eos = [&](int k) {
    EngineConfig c = engine_config(MlaPathPolicy::Auto, 64, true, k);
    c.eos_token_ids = {out[5]};
    return c;
  };
  const RunResult want = run_engine(tiny_runner(MlaPathPolicy::Auto, false), cfg_eos(0), cases, decoder);
  for (int k : {2, 4}) {
    const RunResult got = run_engine(tiny_runner(MlaPathPolicy::Auto, true), cfg_eos(k), cases, decoder);
    for (const Arrival& a : cases) {
      const SeqResult& w = want.seqs.at(a.id)[0];
      const SeqResult& g = got.seqs.at(a.id)[0];
      EXPECT_EQ(g.tokens, w.tokens) << a.id << " k=" << k;
      EXPECT_EQ(g.text, w.text) << a.id << " k=" << k;
      EXPECT_EQ(g.finish, w.finish) << a.id << " k=" << k;
      EXPECT_EQ(g.stop_reason, w.stop_reason) << a.id << " k=" << k;
    }
    EXPECT_EQ(got.counters.n_generation_tokens, want.counters.n_generation_tokens) << k;
    EXPECT_GT(got.counters.n_spec_accepted_tokens, 0) << k;
  }
}

// Upper quantile of the chi-square distribution (Wilson-Hilferty), z the normal quantile.
double chi2_quantile(int df, double z) {
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

// Two-sample chi-square homogeneity statistic over the tokens with at least 10 draws in both
// samples together (the rest pooled); sets df.
double homogeneity(const std::map<int32_t, int>& x, const std::map<int32_t, int>& y, int n, int& df) {
  std::map<int32_t, std::pair<int, int>> cells;
  for (const auto& [t, c] : x) cells[t].first += c;
  for (const auto& [t, c] : y) cells[t].second += c;
  std::vector<std::pair<int, int>> bins;
  std::pair<int, int> rest{0, 0};
  for (const auto& [t, c] : cells) {
    if (c.first + c.second >= 10)
      bins.push_back(c);
    else
      rest = {rest.first + c.first, rest.second + c.second};
  }
  if (rest.first + rest.second > 0) bins.push_back(rest);
  double stat = 0;
  for (const auto& [a, b] : bins) {
    const double e = (a + b) / 2.0;  // equal sample sizes
    stat += (a - e) * (a - e) / e + (b - e) * (b - e) / e;
  }
  df = static_cast<int>(bins.size()) - 1;
  (void)n;
  return stat;
}

TEST(SpecEngine, SampledFirstAndSecondTokensFollowThePlainDistribution) {
  const int n = 700;
  const std::vector<int32_t> prompt = prompt_of(6, 2);
  struct Params {
    float temperature;
    int top_k;
    float top_p;
  };
  for (const Params& sp : {Params{0.8f, 0, 1.0f}, Params{1.0f, 12, 0.9f}}) {
    std::vector<Arrival> reqs;
    for (int i = 0; i < n; ++i) {
      SamplingParams p;
      p.temperature = sp.temperature;
      p.top_k = sp.top_k;
      p.top_p = sp.top_p;
      p.max_tokens = 3;
      p.ignore_eos = true;
      p.seed = 1000 + i;
      reqs.push_back({"s" + std::to_string(i), prompt, p, 0});
    }
    auto cfg = [](int k) {
      EngineConfig c = engine_config(MlaPathPolicy::Auto, 2048, true, k);
      c.max_num_seqs = 128;
      return c;
    };
    const RunResult plain = run_engine(tiny_runner(MlaPathPolicy::Auto, false), cfg(0), reqs);
    const RunResult spec = run_engine(tiny_runner(MlaPathPolicy::Auto, true), cfg(2), reqs);
    EXPECT_GT(spec.counters.n_spec_accepted_tokens, n / 10);
    EXPECT_GT(spec.counters.n_spec_draft_tokens, spec.counters.n_spec_accepted_tokens);  // some rejections too
    for (int pos = 0; pos < 3; ++pos) {
      std::map<int32_t, int> a, b;
      for (const auto& r : reqs) {
        ++a[plain.seqs.at(r.id)[0].tokens.at(pos)];
        ++b[spec.seqs.at(r.id)[0].tokens.at(pos)];
      }
      int df = 0;
      const double stat = homogeneity(a, b, n, df);
      ASSERT_GE(df, 3) << "position " << pos;
      // p < 1e-4 (z = 3.72) for a test that runs in every build: a false alarm is that rare.
      EXPECT_LT(stat, chi2_quantile(df, 3.72)) << "position " << pos << " T=" << sp.temperature << " df=" << df;
    }
  }
}

TEST(SpecEngine, TheDispatchTraceShowsTheVerifyRowsPath) {
  Engine engine(tiny_runner(MlaPathPolicy::Auto, true)(), engine_config(MlaPathPolicy::Auto, 64, true, 3));
  engine.add_request("t", prompt_of(5, 1), greedy(12));
  engine.step();  // the prompt, then the first drafts
  trace_configure("dispatch:40");
  {
    CaptureLog cap;
    while (engine.has_unfinished()) engine.step();
    // Verify rows (1 + 3) take the decode's path (MQA under auto); the MTP layer is blk.3.
    EXPECT_GT(count_occurrences(cap.text(),
                                "dispatch layer=blk.0 is_sparse=0 num_mqa=1 num_mha=0 total_toks=4 "
                                "policy=auto verify_mqa=4 verify_mha=0"),
              0)
        << cap.text();
    EXPECT_GT(count_occurrences(cap.text(), "dispatch layer=blk.3 "), 0) << cap.text();
  }
  trace_reset();
}

TEST(SpecEngine, BadConfigurationsFailWithOneLine) {
  EXPECT_EQ(parse_speculative_config(""), 0);
  EXPECT_EQ(parse_speculative_config(R"({"method": "mtp", "num_speculative_tokens": 3})"), 3);
  auto message = [](const char* text) {
    try {
      parse_speculative_config(text);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(R"({"method": "mtp", "num_speculative_tokens": 5})").find("must be 1 to 4, got 5"),
            std::string::npos);
  EXPECT_NE(message(R"({"method": "mtp", "num_speculative_tokens": 0})").find("must be 1 to 4, got 0"),
            std::string::npos);
  EXPECT_NE(message(R"({"method": "ngram", "num_speculative_tokens": 2})").find(R"(method "ngram" is not supported)"),
            std::string::npos);
  EXPECT_NE(message(R"({"method": "mtp"})").find("num_speculative_tokens is missing"), std::string::npos);
  EXPECT_NE(message(R"({"method": "mtp", "num_speculative_tokens": "2"})").find("must be an integer"),
            std::string::npos);
  EXPECT_NE(message(R"({"method": "mtp", "k": 2})").find("unknown key 'k'"), std::string::npos);
  EXPECT_NE(message(R"({"method": "mtp", )").find("not valid JSON"), std::string::npos);
  EXPECT_NE(message("[1]").find("expected a JSON object"), std::string::npos);
  for (const char* bad : {R"({"method": "mtp", "num_speculative_tokens": 5})", R"({"method": "mtp", )"})
    EXPECT_EQ(message(bad).find('\n'), std::string::npos) << bad;

  // The engine: K out of range, or no MTP layer loaded.
  EXPECT_THROW(Engine(tiny_runner(MlaPathPolicy::Auto, true)(), engine_config(MlaPathPolicy::Auto, 64, true, 5)),
               Error);
  try {
    Engine e(tiny_runner(MlaPathPolicy::Auto, false)(), engine_config(MlaPathPolicy::Auto, 64, true, 2));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs the model's MTP layer"), std::string::npos) << e.what();
  }
  // A file without an MTP layer.
  const std::string no_mtp = std::string(MLA_SOURCE_DIR) + "/tests/fixtures/reference/deepseek-v3-tiny/model-f32.gguf";
  try {
    ModelOptions mo;
    mo.mtp = true;
    Deepseek2Runner r(no_mtp, MlaPathPolicy::Auto, mo, KvCacheOptions{});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs an MTP (nextn) layer; the file has none"), std::string::npos)
        << e.what();
  }
}

TEST(SpecEngine, MetricsUseVllmsSpecDecodeNames) {
  EngineCounters c;
  c.n_kv_blocks = 1;
  c.n_spec_drafts = 7;
  c.n_spec_draft_tokens = 14;
  c.n_spec_accepted_tokens = 9;
  c.n_spec_accepted_per_pos = {6, 3};
  const std::string text = server::ServerMetrics().render(c, "m");
  for (const char* want : {"mla:spec_decode_num_drafts_total{model_name=\"m\"} 7",
                           "mla:spec_decode_num_draft_tokens_total{model_name=\"m\"} 14",
                           "mla:spec_decode_num_accepted_tokens_total{model_name=\"m\"} 9",
                           "mla:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"m\",position=\"0\"} 6",
                           "mla:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"m\",position=\"1\"} 3"})
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  EngineCounters off;
  off.n_kv_blocks = 1;
  EXPECT_EQ(server::ServerMetrics().render(off, "m").find("spec_decode"), std::string::npos);
}

TEST(SpecEngine, NanRouterLogitsStillPickRealExperts) {
  MoeRouting r;
  r.n_expert = 8;
  r.n_expert_used = 2;
  r.gating = MoeGating::Sigmoid;
  std::vector<float> logits(8, NAN), scratch(2 * 8 + 1), weights(2);
  std::vector<int32_t> experts(2, -7);
  moe_route(r, logits.data(), experts.data(), weights.data(), scratch.data());
  for (int32_t e : experts) EXPECT_TRUE(e >= 0 && e < 8) << e;
  logits = {0.1f, NAN, 2.0f, NAN, -1.0f, 3.0f, NAN, 0.0f};
  moe_route(r, logits.data(), experts.data(), weights.data(), scratch.data());
  EXPECT_EQ(experts, (std::vector<int32_t>{2, 5}));
}

}  // namespace
}  // namespace mla::testing
