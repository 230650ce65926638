// The doctor's path agreement and the self-check decision on the embedded model, with one form of
// W_UK corrupted in memory (the class of bug where the two MLA paths are fed differently derived
// weights): the check must name the path and the layer, and `--self-check` must refuse.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>

#include "doctor/doctor.h"
#include "gguf/gguf.h"
#include "model/deepseek2.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace mla {
namespace {

const std::string kTiny = std::string(MLA_SOURCE_DIR) + "/models/tiny-q8_0.gguf";

DoctorOptions small_options() {
  DoctorOptions o;
  o.n_threads = 2;
  o.n_greedy = 4;
  return o;
}

const PathComparison& path_named(const DoctorReport& r, const std::string& name) {
  auto it = std::find_if(r.paths.begin(), r.paths.end(), [&](const PathComparison& p) { return p.name == name; });
  if (it == r.paths.end()) throw std::runtime_error("no path comparison " + name);
  return *it;
}

TEST(Doctor, SelfCheckAgreesOnTheDefaultModel) {
  auto b = load_deepseek2(kTiny, weight_options_for(MlaPathPolicy::Auto, true));
  auto tok = Tokenizer::from_gguf(*b->file);
  const DoctorReport r = run_path_self_check(*b, tok.get(), small_options());
  EXPECT_TRUE(r.ok()) << r.verdict_line;
  for (const char* name : {"mqa", "1-token prefill", "chunked prefill (3)"}) {
    const PathComparison& p = path_named(r, name);
    EXPECT_EQ(p.status, CheckStatus::Ok) << name;
    EXPECT_TRUE(p.greedy_agree) << name;
    ASSERT_EQ(p.layer_rel.size(), 3u);
    for (double d : p.layer_rel) EXPECT_LT(d, 1e-4) << name;
  }
  EXPECT_NO_THROW(apply_self_check("on", r));
}

// An engine serving a forced --mla-path holds W_UK in that path's form only, and the self-check
// runs on the engine's weights: the held path is the reference, the other is n/a (never run on
// weights it lacks), and the chunkings run under the held path.
TEST(Doctor, SelfCheckWithOneWukFormChecksThatPath) {
  for (MlaPathPolicy held : {MlaPathPolicy::Mha, MlaPathPolicy::Mqa}) {
    const std::string name(mla_path_policy_name(held)), other = held == MlaPathPolicy::Mha ? "mqa" : "mha";
    auto b = load_deepseek2(kTiny, weight_options_for(held, false));
    auto tok = Tokenizer::from_gguf(*b->file);
    const DoctorReport r = run_path_self_check(*b, tok.get(), small_options());
    EXPECT_TRUE(r.ok()) << name << ": " << r.verdict_line;
    EXPECT_EQ(r.reference, name);
    EXPECT_EQ(path_named(r, other).status, CheckStatus::NotApplicable) << name;
    for (const char* chunked : {"1-token prefill", "chunked prefill (3)"}) {
      const PathComparison& p = path_named(r, chunked);
      EXPECT_EQ(p.status, CheckStatus::Ok) << name << ", " << chunked;
      ASSERT_EQ(p.layer_rel.size(), 3u);
    }
    EXPECT_NO_THROW(apply_self_check("on", r));
  }
}

TEST(Doctor, DisagreeingMqaWeightsFailThePathCheck) {
  auto b = load_deepseek2(kTiny, weight_options_for(MlaPathPolicy::Auto, true));
  auto tok = Tokenizer::from_gguf(*b->file);
  // Layer 1's absorbed-form W_UK ([n_head][kv_lora_rank][qk_nope]) with its heads reversed; the
  // decompressed form (MHA) keeps the file's order.
  const DeepseekConfig& c = b->config;
  LayerWeights& L = b->weights.layers[1];
  const int64_t per_head = c.kv_lora_rank * c.qk_nope;
  auto uk = std::make_shared<std::vector<float>>(c.n_head * per_head);
  std::vector<float> head(per_head);
  for (int64_t h = 0; h < c.n_head; ++h) {
    const float* src = mla_proj_head(L.w_uk, c.n_head - 1 - h, c.kv_lora_rank, c.qk_nope, head.data());
    std::copy_n(src, per_head, uk->data() + h * per_head);
  }
  L.mla_f32.push_back(uk);
  L.w_uk = uk->data();
  const DoctorReport r = run_path_self_check(*b, tok.get(), small_options());
  EXPECT_EQ(r.verdict, "FAIL");
  EXPECT_NE(r.verdict_line.find("paths:"), std::string::npos) << r.verdict_line;
  EXPECT_NE(r.verdict_line.find("mqa vs mha"), std::string::npos) << r.verdict_line;
  const PathComparison& mqa = path_named(r, "mqa");
  EXPECT_EQ(mqa.status, CheckStatus::Fail);
  EXPECT_LT(mqa.layer_rel[0], 1e-4);  // before the corrupted layer
  EXPECT_GT(mqa.layer_rel[1], 1e-2);
  // Auto sends 1-token steps down MQA, so 1-token prefill disagrees too; whole-prompt MHA
  // chunks mostly do not.
  EXPECT_EQ(path_named(r, "1-token prefill").status, CheckStatus::Fail);

  EXPECT_NO_THROW(apply_self_check("off", r));
  EXPECT_NO_THROW(apply_self_check("warn", r));
  try {
    apply_self_check("on", r);
    FAIL() << "expected the self-check to refuse";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("self-check: FAIL: paths"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "one line expected: " << what;
  }
}

}  // namespace
}  // namespace mla
