// DeepSeek-V4 (`deepseek4`): the full-sequence forward pass against transformers 5.25.0's logits at
// every position of the committed tiny references (tools/deepseek4/make_fixtures.py).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/deepseek4.h"
#include "model_test_util.h"
#include "util/error.h"

namespace mla {
namespace {

std::string fixture(const std::string& model, const std::string& file) {
  return std::string(MLA_SOURCE_DIR) + "/tests/fixtures/deepseek4/" + model + "/" + file;
}

nlohmann::json reference(const std::string& model) {
  std::ifstream in(fixture(model, "reference.json"));
  return nlohmann::json::parse(in);
}

std::vector<float> reference_logits(const std::string& model, size_t n) {
  std::vector<float> v(n);
  std::ifstream in(fixture(model, "logits.f32"), std::ios::binary);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(float)));
  EXPECT_EQ(static_cast<size_t>(in.gcount()), n * sizeof(float)) << model << ": logits.f32 is short";
  return v;
}

// The prefill logits at every position against transformers', relative to the position's
// largest |logit|, and the greedy token at every position.
void check_prefill(const std::string& model) {
  const nlohmann::json ref = reference(model);
  auto b = load_deepseek4(fixture(model, "model-f32.gguf"));
  const std::vector<int32_t> tokens = ref["token_ids"].get<std::vector<int32_t>>();
  const int64_t V = b->config.n_vocab, T = static_cast<int64_t>(tokens.size());
  ASSERT_EQ(V, ref["n_vocab"].get<int64_t>());
  const std::vector<float> want = reference_logits(model, static_cast<size_t>(T * V));
  std::vector<float> got(static_cast<size_t>(T * V));
  Deepseek4Model m(b->config, b->weights, 2);
  m.prefill(tokens, got.data());
  double worst = 0;
  int64_t worst_t = 0;
  for (int64_t t = 0; t < T; ++t) {
    double diff = 0, mag = 0;
    int64_t arg_got = 0, arg_want = 0;
    for (int64_t v = 0; v < V; ++v) {
      diff = std::max(diff, static_cast<double>(std::fabs(got[t * V + v] - want[t * V + v])));
      mag = std::max(mag, static_cast<double>(std::fabs(want[t * V + v])));
      if (got[t * V + v] > got[t * V + arg_got]) arg_got = v;
      if (want[t * V + v] > want[t * V + arg_want]) arg_want = v;
    }
    if (diff / mag > worst) worst = diff / mag, worst_t = t;
    EXPECT_EQ(arg_got, arg_want) << model << ": greedy token differs at position " << t;
  }
  EXPECT_LE(worst, 1e-4) << model << ": worst position " << worst_t;
  std::printf("[ %s ] %lld positions, worst relative logit difference %.2e at position %lld\n", model.c_str(),
              static_cast<long long>(T), worst, static_cast<long long>(worst_t));
}

TEST(Deepseek4Forward, PrefillMatchesTransformersMixed) { check_prefill("mixed"); }
TEST(Deepseek4Forward, PrefillMatchesTransformersYarn) { check_prefill("yarn"); }

}  // namespace
}  // namespace mla
