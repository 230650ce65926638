// The routed-expert cache (--weights-memory) on synth models: with a budget that holds only a few
// experts (so nearly every layer evicts), prefill and greedy decode give the resident run's logits
// bit for bit — both MLA paths, packed and row-major expert layouts, merged gate/up, DSA on and
// off, LFU and LRU — the budget checks refuse with the bytes needed, and a read error (the file
// truncated after load) fails the call naming the tensor and leaves nothing half-read behind.
// With read-ahead on (I/O threads reading the experts predicted for the next layer) the same bits
// come out while predictions miss, reads ahead take slots the forward then needs back, and the
// I/O threads race the forward; a read ahead never takes a slot an acquire pinned.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "model/expert_cache.h"
#include "model_test_util.h"
#include "util/error.h"

namespace mla {
namespace {

using testing::synth_file;
using testing::temp_dir;

constexpr int64_t kBatch = 4;  // max_batch_tokens: one MoE call selects at most 4 experts

SynthSpec moe_spec(GgmlType t) {
  SynthSpec s = testing::small_spec();
  s.n_layer = 4;  // 3 MoE layers x 16 experts = 48 cache keys
  s.n_expert = 16;
  s.n_expert_used = 2;
  s.type = t;
  s.seed = 41;
  if (t == GgmlType::Q4_K) {  // K-quant rows need 256 columns
    s.n_embd = 256;
    s.n_ff_exp = 256;
    s.q_lora_rank = 64;
  }
  return s;
}

struct CacheRun {
  std::vector<float> logits;  // every prompt position, then every decode step
  ExpertCacheCounters counters;
  int64_t n_slots = 0;
};

// The prompt in chunks of kBatch tokens, then n_decode greedy tokens; budget 0: resident.
CacheRun run(const std::string& path, MlaPathPolicy policy, int64_t budget, bool dsa = true, bool repack = true,
             ExpertEviction ev = ExpertEviction::Lfu, int n_prompt = 11, int n_decode = 6, int io_threads = 0) {
  WeightLoadOptions wo = weight_options_for(policy, false);
  wo.repack = repack;
  wo.expert_cache = {
      .budget_bytes = budget, .max_batch_tokens = kBatch, .eviction = ev, .repack = repack, .io_threads = io_threads};
  auto b = load_deepseek2(path, wo);
  ModelOptions o;
  o.n_threads = 2;
  o.max_batch_tokens = kBatch;
  o.dsa = dsa;
  Deepseek2Model m(b->config, b->weights, o);
  std::vector<int32_t> prompt;
  for (int i = 0; i < n_prompt; ++i) prompt.push_back((i * 37 + 5) % static_cast<int>(b->config.n_vocab));
  LatentCache cache = m.make_cache(n_prompt + n_decode + 1);
  const int64_t V = b->config.n_vocab;
  CacheRun r;
  for (int p0 = 0; p0 < n_prompt; p0 += kBatch) {
    std::vector<int32_t> chunk(prompt.begin() + p0, prompt.begin() + std::min<int>(n_prompt, p0 + kBatch));
    std::vector<float> rows(chunk.size() * V);
    m.forward(single_sequence_batch(chunk, p0, true, policy), cache, rows.data());
    r.logits.insert(r.logits.end(), rows.begin(), rows.end());
  }
  int32_t n_past = n_prompt;
  for (int i = 0; i < n_decode; ++i) {
    const float* last = r.logits.data() + r.logits.size() - V;
    const auto next = static_cast<int32_t>(std::max_element(last, last + V) - last);
    std::vector<float> row(V);
    m.forward(single_sequence_batch({next}, n_past++, true, policy), cache, row.data());
    r.logits.insert(r.logits.end(), row.begin(), row.end());
  }
  r.counters = m.expert_cache_counters();
  if (b->weights.expert_cache) r.n_slots = b->weights.expert_cache->n_slots();
  return r;
}

// The resident tensors' bytes and one slot's, from a cache with room to spare.
std::pair<int64_t, int64_t> sizes(const std::string& path) {
  WeightLoadOptions wo;
  wo.expert_cache = {.budget_bytes = int64_t{1} << 30, .max_batch_tokens = kBatch};
  auto b = load_deepseek2(path, wo);
  return {b->weights.expert_cache->resident_bytes(), b->weights.expert_cache->slot_bytes()};
}

// Room for the minimum: the kBatch experts of one MoE call.
int64_t tight_budget(const std::string& path) {
  auto [resident, slot] = sizes(path);
  return resident + kBatch * slot;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void expect_identical(const std::string& path, bool dsa = true, bool repack = true,
                      ExpertEviction ev = ExpertEviction::Lfu, int io_threads = 0, int64_t extra_slots = 0) {
  const int64_t budget = tight_budget(path) + extra_slots * sizes(path).second;
  for (MlaPathPolicy p : {MlaPathPolicy::Mha, MlaPathPolicy::Mqa}) {
    const CacheRun resident = run(path, p, 0, dsa, repack);
    const CacheRun cached = run(path, p, budget, dsa, repack, ev, 11, 6, io_threads);
    EXPECT_TRUE(same_bits(resident.logits, cached.logits)) << path << " policy " << static_cast<int>(p);
    EXPECT_EQ(resident.counters.misses, 0);
    EXPECT_EQ(cached.n_slots, kBatch + extra_slots);
    // 3 layers x 2 experts per token, 17 forward calls: far more lookups than the slots hold.
    EXPECT_GT(cached.counters.misses, 3 * kBatch) << "the budget did not force eviction";
    EXPECT_GT(cached.counters.hits, 0);
    EXPECT_GT(cached.counters.bytes_read, 0);
    const ExpertCacheCounters& c = cached.counters;
    if (io_threads == 0) {
      EXPECT_EQ(c.predictions, 0);
      EXPECT_EQ(c.read_ahead_bytes, 0);
      continue;
    }
    // Layers 2 and 3 are predicted (layer 1, the first MoE layer, from the dense layer 0's input).
    EXPECT_GT(c.predictions, 0);
    EXPECT_GT(c.read_ahead, 0) << "nothing was read ahead";
    EXPECT_GT(c.read_ahead_bytes, 0);
    EXPECT_LT(c.read_ahead_bytes, c.bytes_read) << "some experts must have been read on demand";
    EXPECT_GT(c.predictions_used, 0);
    EXPECT_LT(c.predictions_used, c.predictions) << "no misprediction: the test does not cover one";
    EXPECT_LT(c.predictions_used, c.predictable_uses) << "no used expert went unpredicted";
  }
}

TEST(ExpertCache, BitIdenticalPackedQ8_0) { expect_identical(synth_file("ec_q8_0", moe_spec(GgmlType::Q8_0))); }

TEST(ExpertCache, BitIdenticalPackedQ4_K) { expect_identical(synth_file("ec_q4_k", moe_spec(GgmlType::Q4_K))); }

TEST(ExpertCache, BitIdenticalRowMajor) {
  // --no-repack: the file's rows in the slots, the row-dot kernels, both runs.
  expect_identical(synth_file("ec_q4_k", moe_spec(GgmlType::Q4_K)), true, false);
}

TEST(ExpertCache, BitIdenticalMergedGateUpLru) {
  SynthSpec s = moe_spec(GgmlType::Q8_0);
  s.merged_gate_up = true;
  expect_identical(synth_file("ec_merged", s), true, true, ExpertEviction::Lru);
}

TEST(ExpertCache, BitIdenticalDsaOnAndOff) {
  SynthSpec s = moe_spec(GgmlType::Q8_0);
  s.arch = "glm-dsa";
  s.n_indexer_head = 4;
  s.indexer_head_dim = 16;
  s.indexer_top_k = 6;  // < the 17 positions: the selection is sparse
  const std::string path = synth_file("ec_glm_dsa", s);
  expect_identical(path, true);
  expect_identical(path, false);
}

// Read-ahead on: at the smallest budget (every read ahead takes a slot the forward may need back)
// and with 4 slots to spare; packed and row-major, merged gate/up with LRU, DSA.
TEST(ExpertCache, ReadAheadBitIdenticalAtTheSmallestBudget) {
  expect_identical(synth_file("ec_q8_0", moe_spec(GgmlType::Q8_0)), true, true, ExpertEviction::Lfu, 2, 0);
}

TEST(ExpertCache, ReadAheadBitIdenticalWithSpareSlots) {
  expect_identical(synth_file("ec_q8_0", moe_spec(GgmlType::Q8_0)), true, true, ExpertEviction::Lfu, 2, 4);
  expect_identical(synth_file("ec_q4_k", moe_spec(GgmlType::Q4_K)), true, true, ExpertEviction::Lfu, 1, 4);
}

TEST(ExpertCache, ReadAheadBitIdenticalRowMajorMergedLru) {
  SynthSpec s = moe_spec(GgmlType::Q8_0);
  s.merged_gate_up = true;
  const std::string path = synth_file("ec_merged", s);
  expect_identical(path, true, false, ExpertEviction::Lru, 3, 4);
  expect_identical(path, true, true, ExpertEviction::Lru, 2, 0);
}

TEST(ExpertCache, ReadAheadBitIdenticalDsa) {
  SynthSpec s = moe_spec(GgmlType::Q8_0);
  s.arch = "glm-dsa";
  s.n_indexer_head = 4;
  s.indexer_head_dim = 16;
  s.indexer_top_k = 6;
  expect_identical(synth_file("ec_glm_dsa", s), true, true, ExpertEviction::Lfu, 2, 2);
}

// The cache alone: a read ahead takes only slots no acquire pins, its experts are then hits, and
// the counters say what was predicted and used. Row-major slots, so a slot's bytes are the file's.
TEST(ExpertCache, ReadAheadNeverTakesAPinnedSlot) {
  const std::string path = synth_file("ec_q8_0", moe_spec(GgmlType::Q8_0));
  const auto [resident, slot] = sizes(path);
  WeightLoadOptions wo;
  wo.repack = false;
  wo.expert_cache = {.budget_bytes = resident + 6 * slot, .max_batch_tokens = kBatch, .repack = false, .io_threads = 2};
  auto b = load_deepseek2(path, wo);
  ExpertCache& cache = *b->weights.expert_cache;
  ASSERT_EQ(cache.n_slots(), 6);
  ASSERT_EQ(cache.io_threads(), 2);
  const LayerWeights& la = b->weights.layers[1];
  const LayerWeights& lb = b->weights.layers[2];
  const int64_t F = b->config.n_ff_exp;
  ThreadPool pool(2);
  auto holds_file_rows = [&](const ExpertLease& lease, const LayerWeights& L, int32_t e) {
    const WeightMatrix m = cache.matrix(lease, L.ffn_up_exps, e);
    const WeightMatrix want = L.ffn_up_exps.rows(e * F, F);
    return std::memcmp(m.data, want.data, static_cast<size_t>(F * want.row_bytes)) == 0;
  };
  // Every slot filled, experts 4 and 5 used most: under LFU experts 0..3 would be the victims.
  ExpertLease lease;
  const int32_t all[] = {0, 1, 2, 3, 4, 5}, most[] = {4, 5};
  cache.acquire(la, all, 6, pool, lease);
  cache.release(lease);
  for (int i = 0; i < 3; ++i) {
    cache.acquire(la, most, 2, pool, lease);
    cache.release(lease);
  }
  ExpertLease pinned;
  const int32_t first[] = {0, 1, 2, 3};
  cache.acquire(la, first, 4, pool, pinned);
  // Six predicted for the next layer, two slots not pinned: two are read ahead, into 4's and 5's.
  const int32_t predicted[] = {10, 11, 12, 13, 14, 15};
  cache.read_ahead(lb, predicted, 6);
  cache.wait_read_ahead_idle();
  ExpertCacheCounters c = cache.counters();
  EXPECT_EQ(c.read_ahead, 2);
  EXPECT_EQ(c.predictions, 6);
  EXPECT_EQ(c.misses, 6);
  EXPECT_EQ(c.hits, 10);
  for (int32_t e : first) EXPECT_TRUE(holds_file_rows(pinned, la, e)) << "pinned expert " << e << " overwritten";
  cache.release(pinned);
  // The two read ahead (the most wanted: listed first) are hits; 14 was predicted but not read.
  ExpertLease next;
  const int32_t used[] = {10, 11, 14, 7};
  cache.acquire(lb, used, 4, pool, next);
  for (int32_t e : used) EXPECT_TRUE(holds_file_rows(next, lb, e)) << "expert " << e;
  cache.release(next);
  c = cache.counters();
  EXPECT_EQ(c.hits, 12);
  EXPECT_EQ(c.misses, 8);
  EXPECT_EQ(c.predictions_used, 3);  // 10, 11, 14
  EXPECT_EQ(c.predictable_uses, 4);
  EXPECT_GT(c.read_ahead_bytes, 0);
  EXPECT_GT(c.bytes_read, c.read_ahead_bytes);
}

TEST(ExpertCache, RefusesABudgetBelowOneLayersExperts) {
  const std::string path = synth_file("ec_q8_0", moe_spec(GgmlType::Q8_0));
  auto [resident, slot] = sizes(path);
  const int64_t needed = resident + kBatch * slot;
  try {
    run(path, MlaPathPolicy::Mqa, needed - 1);
    FAIL() << "a budget one byte short was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("--weights-memory"), std::string::npos) << msg;
    EXPECT_NE(msg.find(fmt::format("give at least {} bytes", needed)), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  EXPECT_NO_THROW(run(path, MlaPathPolicy::Mqa, needed, true, true, ExpertEviction::Lfu, 3, 1));
}

TEST(ExpertCache, RefusesABudgetAbovePhysicalMemory) {
  const std::string path = synth_file("ec_q8_0", moe_spec(GgmlType::Q8_0));
  const int64_t phys = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  try {
    run(path, MlaPathPolicy::Mqa, phys + 4096);
    FAIL() << "a budget above physical memory was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than this machine's memory"), std::string::npos) << e.what();
  }
}

void read_error_case(int io_threads) {
  // A copy with the last layer's routed down projection moved to the end of the file, then cut
  // inside it after load.
  const std::string src = synth_file("ec_q8_0", moe_spec(GgmlType::Q8_0));
  const std::string path = temp_dir() + fmt::format("/ec_truncated_{}.gguf", io_threads);
  const std::string last_name = "blk.3.ffn_down_exps.weight";
  {
    auto in = GgufFile::open(src);
    GgufWriter w;
    w.copy_metadata_from(*in);
    for (int pass = 0; pass < 2; ++pass)
      for (const auto& t : in->tensors())
        if ((t.name == last_name) == (pass == 1))
          w.add_tensor(t.name, t.type, t.ne, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
    w.write(path);
  }
  auto f = GgufFile::open(path);
  const GgufTensorInfo& last = f->require_tensor(last_name);
  const auto full_size = static_cast<std::uintmax_t>(f->file_size());
  ASSERT_EQ(f->data_offset() + last.offset + last.n_bytes, full_size);
  const auto cut = f->data_offset() + last.offset + 1;
  f.reset();

  const CacheRun resident = run(src, MlaPathPolicy::Mqa, 0);
  WeightLoadOptions wo;
  wo.expert_cache = {
      .budget_bytes = tight_budget(src) + 2 * sizes(src).second, .max_batch_tokens = kBatch, .io_threads = io_threads};
  auto b = load_deepseek2(path, wo);
  ModelOptions o;
  o.n_threads = 2;
  o.max_batch_tokens = kBatch;
  Deepseek2Model m(b->config, b->weights, o);
  std::vector<char> saved(full_size - cut);
  {
    std::ifstream in(path, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(cut));
    in.read(saved.data(), static_cast<std::streamsize>(saved.size()));
  }
  std::filesystem::resize_file(path, cut);
  // Every token routes through the last layer; its experts' rows are past the cut.
  const std::vector<int32_t> prompt = {5, 42, 15, 52};
  LatentCache cache = m.make_cache(16);
  std::vector<float> rows(prompt.size() * b->config.n_vocab);
  try {
    m.forward(single_sequence_batch(prompt, 0, true, MlaPathPolicy::Mqa), cache, rows.data());
    FAIL() << "a forward over a truncated file succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(last_name), std::string::npos) << e.what();
  }
  // The file restored: the same model gives the resident logits, so nothing partial was kept.
  {
    std::ofstream out(path, std::ios::binary | std::ios::app);
    out.write(saved.data(), static_cast<std::streamsize>(saved.size()));
  }
  LatentCache cache2 = m.make_cache(16);
  m.forward(single_sequence_batch(prompt, 0, true, MlaPathPolicy::Mqa), cache2, rows.data());
  const std::vector<float> want(resident.logits.begin(), resident.logits.begin() + rows.size());
  EXPECT_TRUE(same_bits(rows, want));
}

TEST(ExpertCache, ReadErrorNamesTheTensorAndLeavesNoPartialExpert) { read_error_case(0); }

// The reads ahead of the cut layer fail on the I/O threads; the acquire reads those experts
// again and reports the error as without read-ahead.
TEST(ExpertCache, ReadErrorWithReadAheadNamesTheTensor) { read_error_case(2); }

}  // namespace
}  // namespace mla
