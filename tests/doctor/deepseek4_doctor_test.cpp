// `mla doctor` on deepseek4 files: the committed transformers fixture and synthetic files pass
// every check; the sparse-vs-dense check fails once the prompt is long enough for the indexer to
// drop entries (so it can fail), and is n/a without CSA layers. The sizes the checks must use come
// from transformers' config of the fixture (reference.json), not from our loader.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "../model/model_test_util.h"
#include "doctor/doctor.h"
#include "model/synth.h"

namespace mla {
namespace {

const std::string kMixed = std::string(MLA_SOURCE_DIR) + "/tests/fixtures/deepseek4/mixed/";

CheckStatus status_of(const DoctorReport& r, const std::string& name) {
  auto it = std::find_if(r.checks.begin(), r.checks.end(), [&](const DoctorCheck& c) { return c.name == name; });
  if (it == r.checks.end()) throw std::runtime_error("no check " + name);
  return it->status;
}

const PathComparison& path_named(const DoctorReport& r, const std::string& name) {
  auto it = std::find_if(r.paths.begin(), r.paths.end(), [&](const PathComparison& p) { return p.name == name; });
  if (it == r.paths.end()) throw std::runtime_error("no comparison " + name);
  return *it;
}

DoctorOptions options() {
  DoctorOptions o;
  o.n_threads = 2;
  return o;
}

TEST(Deepseek4Doctor, FixturePassesEveryCheck) {
  std::ifstream in(kMixed + "reference.json");
  const nlohmann::json cfg = nlohmann::json::parse(in)["config"];
  const int64_t m = cfg["compress_rates"]["compressed_sparse_attention"].get<int64_t>();
  const int64_t top_k = cfg["index_topk"].get<int64_t>();
  const DoctorReport r = run_doctor(kMixed + "model-f32.gguf", options());
  EXPECT_TRUE(r.ok()) << r.verdict_line << "\n" << format_doctor_report(r);
  EXPECT_EQ(r.architecture, "deepseek4");
  for (const char* name : {"load", "layout", "finite", "paths", "sparse"})
    EXPECT_EQ(status_of(r, name), CheckStatus::Ok) << name;
  EXPECT_EQ(status_of(r, "absorbed"), CheckStatus::NotApplicable);
  // The longest prompt at which the last query sees exactly top_k entries.
  const PathComparison& sparse = path_named(r, "sparse vs dense");
  const std::string n_tokens = std::to_string(m * (top_k + 1) - 1) + " tokens: up to " + std::to_string(top_k);
  EXPECT_EQ(sparse.note.rfind(n_tokens, 0), 0u) << sparse.note;
  EXPECT_LE(sparse.logits_rel, 1e-4);
  for (const char* name : {"chunked prefill (3)", "decode (1 token)", "runner steps, batched"})
    EXPECT_LE(path_named(r, name).logits_rel, 1e-4) << name;
  const std::string text = format_doctor_report(r);
  EXPECT_NE(text.find("check absorbed  n/a"), std::string::npos) << text;
  EXPECT_NE(text.find("check sparse    ok"), std::string::npos) << text;
}

TEST(Deepseek4Doctor, SparseCheckFailsWhereTheIndexerDropsEntries) {
  DoctorOptions o = options();
  o.ds4_sparse_tokens = 96;  // 24 entries for the last query, top_k 8: sparse and dense differ
  const DoctorReport r = run_doctor(kMixed + "model-f32.gguf", o);
  EXPECT_EQ(r.verdict, "FAIL");
  EXPECT_EQ(status_of(r, "sparse"), CheckStatus::Fail);
  EXPECT_NE(r.verdict_line.find("sparse: "), std::string::npos) << r.verdict_line;
  EXPECT_GT(path_named(r, "sparse vs dense").logits_rel, 1e-4);
  EXPECT_EQ(status_of(r, "paths"), CheckStatus::Ok);  // the rest still agrees
}

SynthSpec synth_spec(const std::string& ratios) {
  SynthSpec s;
  s.arch = "deepseek4";
  s.n_layer = 3, s.n_embd = 64, s.n_head = 4, s.head_dim = 32, s.qk_rope = 8, s.q_lora_rank = 32;
  s.o_groups = 2, s.o_lora_rank = 16, s.n_window = 8, s.compress_ratios = ratios, s.n_hash_layers = 1;
  s.n_expert = 8, s.n_expert_used = 2, s.n_ff_exp = 32, s.n_vocab = 300;
  s.n_indexer_head = 2, s.indexer_head_dim = 16, s.indexer_top_k = 3;
  return s;
}

TEST(Deepseek4Doctor, SyntheticFiles) {
  const std::string path = testing::temp_dir() + "/doctor-ds4.gguf";
  write_synth_deepseek2(synth_spec("4,128,4"), path);
  DoctorReport r = run_doctor(path, options());
  EXPECT_TRUE(r.ok()) << r.verdict_line;
  EXPECT_EQ(path_named(r, "sparse vs dense").note.rfind("15 tokens: up to 3 CSA entries", 0), 0u);
  // Without CSA layers there is no indexer to compare against.
  write_synth_deepseek2(synth_spec("0,128,0"), path);
  r = run_doctor(path, options());
  EXPECT_TRUE(r.ok()) << r.verdict_line;
  EXPECT_EQ(status_of(r, "sparse"), CheckStatus::NotApplicable);
}

}  // namespace
}  // namespace mla
