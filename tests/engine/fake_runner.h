#pragma once
// A tiny deterministic stand-in for the model, for engine tests that must not need one.
//
// Two "layers" over a real LatentCache. For the token t at position p of a sequence:
//   layer 0 row  x0[j] = sin(0.7 t + 1.3 j + 0.1) + 0.01 sin(0.37 p + j)
//   layer 1 row  x1[j] = tanh(x0[j] + sum_{r<=p} w(p-r) * L0_r[j]),   w(d) = 1 / (1 + d)
//   logits       l[v]  = 3 * sum_j W[v][j] * sum_{r<=p} w(p-r) * L1_r[j],  W[v][j] = sin(1.7 v +
//                0.9 j + 0.31 v j)
// where L0_r / L1_r are the rows of position r read back from the cache through the block table,
// so any error in slot mapping, block tables, copy-on-write or prefix caching changes the
// outputs. The MHA path sums r = 0..p, the MQA path r = p..0 (same value, different rounding),
// like the two MLA paths of the real model, and like the model it picks each sequence's path from
// the batch's policy (auto: query length <= decode_threshold, or verify rows, down MQA, longer
// ones down MHA) and counts the tokens it sent down each. Every sequence is computed on its own: the fake is
// batch-invariant by construction.
#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <vector>

#include "engine/model_runner.h"

namespace mla::testing {

class FakeRunner : public ModelRunner {
 public:
  static constexpr int kLayers = 2;
  static constexpr int kLatent = 6, kRope = 2, kDim = kLatent + kRope;

  struct StepRecord {
    int n_tokens = 0;
    int n_seqs = 0;
    int n_logit_rows = 0;
    std::vector<int> query_lens;
    std::vector<MlaPath> paths;
  };
  using StepLog = std::vector<StepRecord>;

  // log (optional) receives one record per forward call and may outlive the runner.
  FakeRunner(int n_vocab, int block_size, int32_t n_blocks, GgmlType dtype = GgmlType::F32,
             std::shared_ptr<StepLog> log = nullptr, int max_context = 4096)
      : log_(log ? std::move(log) : std::make_shared<StepLog>()),
        n_vocab_(n_vocab),
        max_context_(max_context),
        cache_({kLayers, kLatent, kRope}, dtype, block_size, n_blocks) {}

  int n_vocab() const override { return n_vocab_; }
  int max_context() const override { return max_context_; }
  LatentCache& cache() override { return cache_; }
  PathTokens path_tokens() const override { return tokens_; }

  static float weight(int d) { return 1.0f / (1.0f + static_cast<float>(d)); }
  static float embed(int32_t t, int p, int j) {
    return std::sin(0.7f * t + 1.3f * j + 0.1f) + 0.01f * std::sin(0.37f * p + j);
  }
  static float w_out(int v, int j) { return std::sin(1.7f * v + 0.9f * j + 0.31f * v * j); }

  // The three pieces of arithmetic, shared by forward() and reference_logits() and kept out of
  // line so that both round identically (no differently contracted or vectorized copies).
  [[gnu::noinline]] static void axpy(float* acc, float w, const float* x) {
    for (int j = 0; j < kDim; ++j) acc[j] += w * x[j];
  }
  [[gnu::noinline]] static void layer1(float* row, const float* acc) {
    for (int j = 0; j < kDim; ++j) row[j] = std::tanh(row[j] + acc[j]);
  }
  [[gnu::noinline]] static void project(const float* acc, float* logits, int n_vocab) {
    for (int v = 0; v < n_vocab; ++v) {
      float sum = 0;
      for (int j = 0; j < kDim; ++j) sum += w_out(v, j) * acc[j];
      logits[v] = 3.0f * sum;
    }
  }

  void forward(const BatchMeta& meta, float* logits) override {
    StepRecord rec;
    rec.n_tokens = static_cast<int>(meta.n_tokens());
    rec.n_seqs = static_cast<int>(meta.seqs.size());
    rec.n_logit_rows = static_cast<int>(meta.logits_rows.size());
    std::vector<float> row(kDim), acc(kDim), ctx;
    size_t out_row = 0;
    for (const SeqMeta& s : meta.seqs) {
      rec.query_lens.push_back(s.query_len);
      const MlaPath path = meta.policy == MlaPathPolicy::Mqa                       ? MlaPath::Mqa
                           : meta.policy == MlaPathPolicy::Mha                     ? MlaPath::Mha
                           : (s.verify ? 1 : s.query_len) <= meta.decode_threshold ? MlaPath::Mqa
                                                                                   : MlaPath::Mha;
      rec.paths.push_back(path);
      const bool mqa = path == MlaPath::Mqa;
      (mqa ? tokens_.mqa : tokens_.mha) += s.query_len;
      const int32_t* slots = meta.context_slots.data() + s.slots_start;
      for (int i = s.query_start; i < s.query_start + s.query_len; ++i) {
        const int p = meta.positions[i];
        const int32_t t = meta.token_ids[i];
        for (int j = 0; j < kDim; ++j) row[j] = embed(t, p, j);
        cache_.write_row(0, meta.slot_mapping[i], row.data());
        attend(slots, 0, p, mqa, acc, ctx);
        layer1(row.data(), acc.data());
        cache_.write_row(1, meta.slot_mapping[i], row.data());
        if (out_row < meta.logits_rows.size() && meta.logits_rows[out_row] == i) {
          attend(slots, 1, p, mqa, acc, ctx);
          project(acc.data(), logits + out_row++ * n_vocab_, n_vocab_);
        }
      }
    }
    log_->push_back(std::move(rec));
  }

  // The logits after tokens[0..n) computed directly from the formulas, without a cache (F32,
  // MHA order): the reference for an F32 cache.
  std::vector<float> reference_logits(std::span<const int32_t> tokens) const {
    const int n = static_cast<int>(tokens.size());
    std::vector<std::vector<float>> l0(n, std::vector<float>(kDim)), l1 = l0;
    std::vector<float> acc(kDim);
    for (int p = 0; p < n; ++p) {
      for (int j = 0; j < kDim; ++j) l0[p][j] = embed(tokens[p], p, j);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int r = 0; r <= p; ++r) axpy(acc.data(), weight(p - r), l0[r].data());
      l1[p] = l0[p];
      layer1(l1[p].data(), acc.data());
    }
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int r = 0; r < n; ++r) axpy(acc.data(), weight(n - 1 - r), l1[r].data());
    std::vector<float> out(n_vocab_);
    project(acc.data(), out.data(), n_vocab_);
    return out;
  }

 private:
  // acc[j] = sum over context rows r <= p of layer `layer` of weight(p - r) * row_r[j].
  void attend(const int32_t* slots, int layer, int p, bool reverse, std::vector<float>& acc, std::vector<float>& ctx) {
    ctx.resize(static_cast<size_t>(p + 1) * kDim);
    cache_.read_rows(layer, {slots, static_cast<size_t>(p + 1)}, ctx.data());
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int k = 0; k <= p; ++k) {
      const int r = reverse ? p - k : k;
      axpy(acc.data(), weight(p - r), ctx.data() + static_cast<size_t>(r) * kDim);
    }
  }

  std::shared_ptr<StepLog> log_;
  int n_vocab_;
  int max_context_;
  LatentCache cache_;
  PathTokens tokens_;
};

}  // namespace mla::testing
