// The model's share of the multi-process forward without MPI: N ranks as N threads talking through
// an in-process Comm, each running the forward with ModelOptions::comm. Rank 0's logits must be
// the single-process logits bit for bit, for expert and tensor parallelism together, on synth
// variants (plain, lite with merged gate/up, glm-dsa with a sparse selection). The same under
// mpirun is tests/py/test_mpi.py.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "../model/model_test_util.h"
#include "parallel/comm.h"
#include "util/error.h"

namespace mla {
namespace {

// Ranks as threads: one FIFO of messages per ordered pair of ranks. Every rank calls the
// collectives in the same order, so per-pair FIFOs keep broadcasts and sends apart.
class Hub {
 public:
  explicit Hub(int n) : n_(n) {}
  int size() const { return n_; }
  void put(int src, int dst, const void* data, size_t bytes) {
    {
      std::lock_guard lk(mu_);
      const auto* p = static_cast<const uint8_t*>(data);
      queues_[{src, dst}].emplace_back(p, p + bytes);
    }
    cv_.notify_all();
  }
  void take(int src, int dst, void* data, size_t bytes) {
    std::unique_lock lk(mu_);
    auto& q = queues_[{src, dst}];
    cv_.wait(lk, [&] { return !q.empty(); });
    ASSERT_EQ(q.front().size(), bytes);
    std::memcpy(data, q.front().data(), bytes);
    q.pop_front();
  }

 private:
  int n_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<int, int>, std::deque<std::vector<uint8_t>>> queues_;
};

class ThreadComm final : public Comm {
 public:
  ThreadComm(Hub& hub, int rank) : hub_(hub), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return hub_.size(); }
  void broadcast(void* data, size_t bytes, int root) override {
    if (rank_ != root) return hub_.take(root, rank_, data, bytes);
    for (int r = 0; r < size(); ++r)
      if (r != root) hub_.put(root, r, data, bytes);
  }
  void send(const void* data, size_t bytes, int dest) override { hub_.put(rank_, dest, data, bytes); }
  void recv(void* data, size_t bytes, int src) override { hub_.take(src, rank_, data, bytes); }
  void all_gather(const void* mine, size_t bytes, void* all) override {
    for (int r = 0; r < size(); ++r)
      if (r != rank_) hub_.put(rank_, r, mine, bytes);
    for (int r = 0; r < size(); ++r) {
      auto* dst = static_cast<uint8_t*>(all) + r * bytes;
      if (r == rank_)
        std::memcpy(dst, mine, bytes);
      else
        hub_.take(r, rank_, dst, bytes);
    }
  }

 private:
  Hub& hub_;
  int rank_;
};

// Logits (rank 0's) of a prefill of `prompt` in chunks of 5 then one decode step per token of
// `forced`, each rank on its own thread; n_ranks 1 is the single-process forward.
std::vector<float> run_ranks(const std::string& path, int n_ranks, const std::vector<int32_t>& prompt,
                             const std::vector<int32_t>& forced) {
  auto b = load_deepseek2(path, weight_options_for(MlaPathPolicy::Auto, false));
  const int64_t V = b->config.n_vocab;
  Hub hub(n_ranks);
  std::vector<float> out;
  std::vector<std::string> errors(n_ranks);
  auto rank_main = [&](int rank) {
    try {
      ThreadComm comm(hub, rank);
      ModelOptions o;
      o.n_threads = 1;
      o.max_batch_tokens = 16;
      o.comm = n_ranks > 1 ? &comm : nullptr;
      Deepseek2Model m(b->config, b->weights, o);
      LatentCache cache = m.make_cache(static_cast<int64_t>(prompt.size() + forced.size()) + 1);
      std::vector<float> row;
      auto step = [&](const std::vector<int32_t>& ids, int32_t n_past) {
        BatchMeta batch = single_sequence_batch(ids, n_past, true, MlaPathPolicy::Auto);
        row.resize(ids.size() * V);
        m.forward(batch, cache, rank == 0 ? row.data() : nullptr);
        if (rank == 0) out.insert(out.end(), row.begin(), row.end());
      };
      for (size_t i = 0; i < prompt.size(); i += 5)
        step({prompt.begin() + i, prompt.begin() + std::min(prompt.size(), i + 5)}, static_cast<int32_t>(i));
      for (size_t i = 0; i < forced.size(); ++i) step({forced[i]}, static_cast<int32_t>(prompt.size() + i));
    } catch (const std::exception& e) {
      errors[rank] = e.what();
    }
  };
  std::vector<std::thread> threads;
  for (int r = 1; r < n_ranks; ++r) threads.emplace_back(rank_main, r);
  rank_main(0);
  for (auto& t : threads) t.join();
  for (const auto& e : errors) EXPECT_EQ(e, "");
  return out;
}

void expect_ranks_match(const std::string& path, std::initializer_list<int> rank_counts) {
  const std::vector<int32_t> prompt = {1, 17, 30, 45, 2, 9, 51, 7, 6, 25, 3, 12};
  const std::vector<int32_t> forced = {5, 40, 8, 33, 2, 19};
  const std::vector<float> one = run_ranks(path, 1, prompt, forced);
  ASSERT_FALSE(one.empty());
  for (int n : rank_counts) {
    const std::vector<float> many = run_ranks(path, n, prompt, forced);
    ASSERT_EQ(many.size(), one.size()) << n;
    EXPECT_EQ(std::memcmp(many.data(), one.data(), one.size() * sizeof(float)), 0) << n << " ranks";
  }
}

// Three experts per token: a rank can then hold two of a token's experts after another rank's
// one, the case where partial sums added across ranks would round differently from the chain.
TEST(ModelParallel, ExpertAndTensorParallelLogitsAreBitIdentical) {
  SynthSpec s = testing::small_spec();
  s.n_head = 4, s.n_expert = 7, s.n_expert_used = 3, s.n_expert_shared = 1, s.n_layer = 3, s.n_layer_dense_lead = 1;
  s.type = GgmlType::Q8_0, s.seed = 4;
  expect_ranks_match(testing::synth_file("parallel_plain", s), {2, 3, 4});
}

TEST(ModelParallel, LiteMergedGateUpAndSparseAttentionToo) {
  SynthSpec lite = testing::small_spec();
  lite.q_lora_rank = 0, lite.merged_gate_up = true, lite.n_head = 5, lite.n_expert = 6, lite.seed = 5;
  expect_ranks_match(testing::synth_file("parallel_lite", lite), {2, 3});
  SynthSpec dsa = testing::small_spec();
  dsa.arch = "glm-dsa", dsa.n_head = 4, dsa.n_expert = 5, dsa.indexer_top_k = 4, dsa.n_indexer_head = 2;
  dsa.indexer_head_dim = 16, dsa.gating = "sigmoid", dsa.seed = 6;
  expect_ranks_match(testing::synth_file("parallel_dsa", dsa), {2, 3});
}

TEST(ModelParallel, MoreRanksThanExpertsOrHeadsIsRefused) {
  SynthSpec s = testing::small_spec();
  s.n_head = 2, s.n_expert = 8;
  auto b = load_deepseek2(testing::synth_file("parallel_two_heads", s), {});
  Hub hub(3);
  ThreadComm comm(hub, 0);
  ModelOptions o;
  o.comm = &comm;
  try {
    Deepseek2Model m(b->config, b->weights, o);
    FAIL() << "3 ranks over 2 heads were accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "3 ranks but the model has 2 attention heads: tensor parallelism needs at most one rank "
                 "per head");
  }
}

}  // namespace
}  // namespace mla
