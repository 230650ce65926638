// The prefix cache's lower tiers on the real deepseek2 forward: a request whose prefix comes back
// from host RAM (tier 1, after the arena gave the blocks away) or from disk (tier 2, in a new
// engine over the same directory: a restart) gives the greedy tokens and logits of the same
// request in an engine without any prefix cache, bit for bit — on both MLA paths, for a dense
// model, a DSA model (indexer keys in the blocks) and with MTP speculation (the MTP layer's rows
// in the blocks). And a damaged directory costs hits, never answers.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "../model/model_test_util.h"
#include "../support/model_engine.h"
#include "engine_harness.h"

namespace mla::testing {
namespace {

namespace fs = std::filesystem;

struct TierCase {
  std::string name;  // fixture name (test name part)
  std::string file;
  MlaPathPolicy policy;
  int n_spec = 0;  // MTP drafts per step (0: no speculation)
};

std::string fixture(const std::string& rel) { return std::string(MLA_SOURCE_DIR) + "/" + rel; }

// A fresh cache directory per test.
std::string fresh_dir(const std::string& name) {
  const std::string d = temp_dir() + "/tiers_" + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

class TierEngine : public ::testing::TestWithParam<TierCase> {
 protected:
  void SetUp() override {
    const TierCase& c = GetParam();
    n_vocab_ = static_cast<int>(load_deepseek2(c.file, {})->config.n_vocab);
  }
  // An arena of 6 blocks of 8 tokens: one 40-token request fills it, so the next one evicts it.
  std::function<std::unique_ptr<ModelRunner>()> runner() const {
    const TierCase& c = GetParam();
    return deepseek2_runner(c.file, c.policy,
                            {.block_size = 8, .tokens = 48, .max_batch_tokens = 2048 + 16, .mtp = c.n_spec > 0});
  }
  EngineConfig engine_config(bool prefix, kv::TierOptions tiers = {}) const {
    EngineConfig e = config(GetParam().policy, 2048, prefix);
    e.num_speculative_tokens = GetParam().n_spec;
    e.kv_tiers = std::move(tiers);
    return e;
  }
  std::vector<int32_t> prompt(int n, int seed) const {
    std::vector<int32_t> p;
    for (int i = 0; i < n; ++i)
      p.push_back(static_cast<int32_t>((seed * 131 + i * 71 + i * i * 7) % (n_vocab_ - 3) + 3));
    return p;
  }
  // The warm-up's 40 tokens; the probe shares its first 32 (4 blocks) and ends differently.
  std::vector<int32_t> warm() const { return prompt(40, 1); }
  std::vector<int32_t> probe() const {
    std::vector<int32_t> p = warm();
    p.resize(32);
    for (int32_t t : prompt(5, 9)) p.push_back(t);
    return p;
  }
  // The probe in an engine with no prefix cache at all.
  RunResult reference() const { return run_engine(runner(), engine_config(false), {{"x", probe(), greedy(6), 0}}); }

  std::vector<std::vector<uint8_t>> arena_after_first_step(const EngineConfig& cfg) const {
    Engine e(runner()(), cfg);
    auto stream = e.add_request("x", probe(), greedy(6));
    e.step();
    const LatentCache& cache = e.runner().cache();
    std::vector<std::vector<uint8_t>> blocks(4, std::vector<uint8_t>(cache.block_bytes()));
    for (int b = 0; b < 4; ++b) cache.read_block(b, blocks[b].data());
    e.run_until_idle();
    return blocks;
  }

  int n_vocab_ = 0;
};

void expect_bit_identical(const RunResult& want, const RunResult& got, const std::string& id) {
  ASSERT_TRUE(got.seqs.count(id)) << id;
  EXPECT_EQ(got.seqs.at(id)[0].tokens, want.seqs.at(id)[0].tokens) << "tokens of " << id;
  ASSERT_FALSE(want.logits.at(id).empty());
  for (const auto& [pos, row] : want.logits.at(id)) {
    ASSERT_TRUE(got.logits.at(id).count(pos)) << "no logits of " << id << " at " << pos;
    const auto& g = got.logits.at(id).at(pos);
    ASSERT_EQ(0, std::memcmp(row.data(), g.data(), row.size() * sizeof(float))) << "logits of " << id << " at " << pos;
  }
}

// The output of speculation does not depend on the drafts, only its counters do: loaded MTP rows
// must give the drafts that computed ones give.
void expect_same_drafts(const RunResult& want, const RunResult& got) {
  EXPECT_EQ(got.counters.n_spec_draft_tokens, want.counters.n_spec_draft_tokens);
  EXPECT_EQ(got.counters.n_spec_accepted_tokens, want.counters.n_spec_accepted_tokens);
  EXPECT_EQ(got.counters.n_spec_accepted_per_pos, want.counters.n_spec_accepted_per_pos);
}

// Tier 1: the warm-up's blocks are written through to host RAM; an unrelated request then takes
// every arena block; the probe finds its 4 shared blocks in RAM only.
TEST_P(TierEngine, HostTierHitIsBitIdenticalToNoCache) {
  kv::TierOptions t;
  t.host_bytes = 64 << 20;
  const std::vector<Arrival> a = {
      {"w", warm(), greedy(3), 0}, {"evict", prompt(40, 5), greedy(3), 8}, {"x", probe(), greedy(6), 16}};
  const RunResult got = run_engine(runner(), engine_config(true, t), a);
  expect_bit_identical(reference(), got, "x");
  expect_same_drafts(run_engine(runner(), engine_config(false), a), got);
  EXPECT_EQ(got.n_cached.at("x"), 32);
  EXPECT_EQ(got.counters.n_tier_host_hits, 4);
  EXPECT_EQ(got.counters.n_tier_disk_hits, 0);
  // With speculation the hit's last position is recomputed (its hidden state feeds the MTP row).
  EXPECT_EQ(got.counters.n_tier_tokens_loaded, GetParam().n_spec > 0 ? 31 : 32);
}

// Tier 2 after a restart: a first engine writes the warm-up's blocks to the directory and stops
// (its writer finishes the queue); a second engine over the same directory, no host tier, finds
// them on disk.
TEST_P(TierEngine, DiskTierHitAfterRestartIsBitIdenticalToNoCache) {
  kv::TierOptions t;
  t.dir = fresh_dir(GetParam().name + "_restart");
  run_engine(runner(), engine_config(true, t), {{"w", warm(), greedy(3), 0}});
  int n_files = 0;  // the 5 full blocks of the 42 computed positions
  for (const auto& d : fs::directory_iterator(t.dir))
    for (const auto& f : fs::directory_iterator(d.path())) n_files += f.path().extension() == ".blk";
  EXPECT_EQ(n_files, 5);
  const RunResult got = run_engine(runner(), engine_config(true, t), {{"x", probe(), greedy(6), 0}});
  const RunResult want = reference();
  expect_bit_identical(want, got, "x");
  expect_same_drafts(want, got);
  EXPECT_EQ(got.n_cached.at("x"), 32);
  EXPECT_EQ(got.counters.n_tier_disk_hits, 4);
  EXPECT_GT(got.counters.tier_disk_bytes_read, 0);
  EXPECT_EQ(got.counters.n_tier_files_rejected, 0);
  // The rows themselves, every layer's (the MTP layer's, which speculation's output does not
  // show, and the indexer keys included): after the probe's first step the loaded blocks hold
  // what computing them writes. A fresh engine hands out blocks 0, 1, ... in order, so the
  // probe's first four blocks are blocks 0-3 in both engines.
  EXPECT_EQ(arena_after_first_step(engine_config(true, t)), arena_after_first_step(engine_config(false)));
}

INSTANTIATE_TEST_SUITE_P(
    Models, TierEngine,
    ::testing::Values(
        TierCase{"v3", fixture("tests/fixtures/reference/deepseek-v3-tiny/model-f32.gguf"), MlaPathPolicy::Mha},
        TierCase{"v3", fixture("tests/fixtures/reference/deepseek-v3-tiny/model-f32.gguf"), MlaPathPolicy::Mqa},
        TierCase{"glm_dsa_mtp", fixture("tests/fixtures/dsa-reference/glm-dsa-tiny/model-f32.gguf"), MlaPathPolicy::Mha,
                 3},
        TierCase{"glm_dsa_mtp", fixture("tests/fixtures/dsa-reference/glm-dsa-tiny/model-f32.gguf"), MlaPathPolicy::Mqa,
                 3},
        TierCase{"glm_dsa", fixture("tests/fixtures/dsa-reference/glm-dsa-tiny/model-f32.gguf"), MlaPathPolicy::Mqa},
        TierCase{"tiny_q8_mtp", fixture("models/tiny-q8_0.gguf"), MlaPathPolicy::Mha, 2}),
    [](const auto& info) { return info.param.name + "_" + std::string(mla_path_policy_name(info.param.policy)); });

// A request that queues behind another (max_num_seqs 1) has its prefix read from disk while it
// waits: the files can be gone by the time it runs, and its answer is the no-cache one.
TEST(TierEngineFaults, AQueuedRequestsBlocksAreReadAhead) {
  const std::string file = fixture("tests/fixtures/reference/deepseek-v3-tiny/model-f32.gguf");
  const int n_vocab = static_cast<int>(load_deepseek2(file, {})->config.n_vocab);
  auto runner = deepseek2_runner(file, MlaPathPolicy::Mha, {.block_size = 8, .tokens = 96});
  std::vector<int32_t> warm, other;
  for (int i = 0; i < 40; ++i) warm.push_back((i * 37 + 11) % (n_vocab - 3) + 3);
  for (int i = 0; i < 20; ++i) other.push_back((i * 53 + 7) % (n_vocab - 3) + 3);
  std::vector<int32_t> probe(warm.begin(), warm.begin() + 32);
  probe.push_back(9);
  kv::TierOptions t;
  t.dir = fresh_dir("prefetch");
  EngineConfig cfg = config(MlaPathPolicy::Mha, 2048, true);
  cfg.kv_tiers = t;
  cfg.max_num_seqs = 1;
  run_engine(runner, cfg, {{"w", warm, greedy(2), 0}});
  const std::vector<Arrival> a = {{"other", other, greedy(4), 0}, {"x", probe, greedy(5), 0}};
  const RunResult want = run_engine(runner, config(MlaPathPolicy::Mha, 2048, false), a);
  const RunResult got = run_engine(runner, cfg, a, nullptr, [&](int step, Engine& e) {
    if (step != 1) return;  // "other" runs, "x" waits: its blocks were asked for at admission
    e.kv().tiers()->flush_prefetch();
    e.kv().tiers()->flush();  // the writer is still writing "other"'s blocks: let it finish first
    for (const auto& d : fs::directory_iterator(t.dir)) fs::remove_all(d.path());
  });
  expect_bit_identical(want, got, "x");
  EXPECT_EQ(got.n_cached.at("x"), 32);
  EXPECT_EQ(got.counters.n_tier_disk_hits, 4);
}

// A block file truncated or corrupted between runs (a crash mid-write that got past the rename, a
// bad disk) is skipped and deleted; the probe loads the blocks before it and computes the rest,
// with the answer of an engine without a cache. A foreign model's directory next to ours is
// never read.
TEST(TierEngineFaults, DamagedFilesCostHitsNotAnswers) {
  const std::string file = fixture("tests/fixtures/reference/deepseek-v3-tiny/model-f32.gguf");
  const int n_vocab = static_cast<int>(load_deepseek2(file, {})->config.n_vocab);
  auto runner = deepseek2_runner(file, MlaPathPolicy::Mqa, {.block_size = 8, .tokens = 48});
  std::vector<int32_t> warm, probe;
  for (int i = 0; i < 40; ++i) warm.push_back((i * 37 + 11) % (n_vocab - 3) + 3);
  probe.assign(warm.begin(), warm.begin() + 32);
  probe.push_back(5);
  kv::TierOptions t;
  t.dir = fresh_dir("faults");
  EngineConfig cfg = config(MlaPathPolicy::Mqa, 2048, true);
  cfg.kv_tiers = t;
  run_engine(runner, cfg, {{"w", warm, greedy(2), 0}});
  // The block files of the first four blocks, in chain order.
  std::vector<std::string> paths;
  uint64_t parent = kv::kRootHash;
  std::string dir;
  for (const auto& e : fs::directory_iterator(t.dir)) dir = e.path().string();
  for (int b = 0; b < 4; ++b) {
    parent = kv::hash_block_tokens(parent, std::span<const int32_t>(warm).subspan(b * 8, 8));
    paths.push_back(dir + "/" + fmt::format("{:016x}", parent) + ".blk");
    ASSERT_TRUE(fs::exists(paths.back())) << paths.back();
  }
  fs::resize_file(paths[2], fs::file_size(paths[2]) - 100);  // block 2 cut mid-block
  fs::create_directories(t.dir + "/0123456789abcdef");       // another model's directory
  fs::copy_file(paths[0], t.dir + "/0123456789abcdef/" + fs::path(paths[0]).filename().string());

  EngineConfig plain = config(MlaPathPolicy::Mqa, 2048, false);
  const RunResult want = run_engine(runner, plain, {{"x", probe, greedy(5), 0}});
  const RunResult got = run_engine(runner, cfg, {{"x", probe, greedy(5), 0}});
  expect_bit_identical(want, got, "x");
  EXPECT_EQ(got.n_cached.at("x"), 16);  // blocks 0 and 1
  EXPECT_EQ(got.counters.n_tier_disk_hits, 2);
  EXPECT_EQ(got.counters.n_tier_files_rejected, 1);
  EXPECT_TRUE(fs::exists(t.dir + "/0123456789abcdef/" + fs::path(paths[0]).filename().string()));
}

}  // namespace
}  // namespace mla::testing
