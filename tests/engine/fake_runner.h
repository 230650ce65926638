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
// like the two MLA paths of the real model. Every sequence is computed on its own: the fake is
// batch-invariant by construction.
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/model_runner.h"

namespace mla::testing {

class FakeRunner : public ModelRunner {
 public:
  static constexpr int kLayers = 2;
  static constexpr int kLatent = 6, kRope = 2, kDim = kLatent + kRope;

  FakeRunner(int n_vocab, int block_size, int32_t n_blocks, GgmlType dtype = GgmlType::F32,
             int max_context = 4096)
      : n_vocab_(n_vocab),
        max_context_(max_context),
        cache_({kLayers, kLatent, kRope}, dtype, block_size, n_blocks) {}

  int n_vocab() const override { return n_vocab_; }
  int max_context() const override { return max_context_; }
  kv::LatentCache& cache() override { return cache_; }

  struct StepRecord {
    int n_tokens = 0;
    int n_seqs = 0;
    int n_logit_rows = 0;
    std::vector<int> query_lens;
    std::vector<MlaPath> paths;
  };
  std::vector<StepRecord> steps;

  static float weight(int d) { return 1.0f / (1.0f + static_cast<float>(d)); }
  static float embed(int32_t t, int p, int j) {
    return std::sin(0.7f * t + 1.3f * j + 0.1f) + 0.01f * std::sin(0.37f * p + j);
  }
  static float w_out(int v, int j) { return std::sin(1.7f * v + 0.9f * j + 0.31f * v * j); }

  void forward(const BatchMeta& meta, float* logits) override {
    StepRecord rec;
    rec.n_tokens = meta.n_tokens();
    rec.n_seqs = meta.n_seqs();
    rec.n_logit_rows = meta.n_logit_rows();
    std::vector<float> row(kDim), acc(kDim), ctx;
    std::vector<int32_t> slots;
    int out_row = 0;
    for (int s = 0; s < meta.n_seqs(); ++s) {
      rec.query_lens.push_back(meta.query_len(s));
      rec.paths.push_back(meta.path[s]);
      const bool mqa = meta.path[s] == MlaPath::kMqa;
      for (int i = meta.query_start[s]; i < meta.query_start[s + 1]; ++i) {
        const int p = meta.positions[i];
        const int32_t t = meta.token_ids[i];
        for (int j = 0; j < kDim; ++j) row[j] = embed(t, p, j);
        cache_.write_row(0, meta.slot_mapping[i], row.data());
        attend(meta, s, 0, p, mqa, acc, slots, ctx);
        for (int j = 0; j < kDim; ++j) row[j] = std::tanh(row[j] + acc[j]);
        cache_.write_row(1, meta.slot_mapping[i], row.data());
        if (i == meta.query_start[s + 1] - 1 && meta.needs_logits[s]) {
          attend(meta, s, 1, p, mqa, acc, slots, ctx);
          float* l = logits + static_cast<size_t>(out_row++) * n_vocab_;
          for (int v = 0; v < n_vocab_; ++v) {
            float sum = 0;
            for (int j = 0; j < kDim; ++j) sum += w_out(v, j) * acc[j];
            l[v] = 3.0f * sum;
          }
        }
      }
    }
    steps.push_back(std::move(rec));
  }

  // The logits after tokens[0..n) computed directly from the formulas, without a cache (F32,
  // MHA order): the reference for an F32 cache.
  std::vector<float> reference_logits(std::span<const int32_t> tokens) const {
    const int n = static_cast<int>(tokens.size());
    std::vector<std::vector<float>> l0(n, std::vector<float>(kDim)), l1 = l0;
    for (int p = 0; p < n; ++p) {
      for (int j = 0; j < kDim; ++j) l0[p][j] = embed(tokens[p], p, j);
      for (int j = 0; j < kDim; ++j) {
        float a = 0;
        for (int r = 0; r <= p; ++r) a += weight(p - r) * l0[r][j];
        l1[p][j] = std::tanh(l0[p][j] + a);
      }
    }
    std::vector<float> out(n_vocab_);
    std::vector<float> h(kDim, 0.0f);
    for (int j = 0; j < kDim; ++j)
      for (int r = 0; r < n; ++r) h[j] += weight(n - 1 - r) * l1[r][j];
    for (int v = 0; v < n_vocab_; ++v) {
      float sum = 0;
      for (int j = 0; j < kDim; ++j) sum += w_out(v, j) * h[j];
      out[v] = 3.0f * sum;
    }
    return out;
  }

 private:
  // acc[j] = sum over context rows r <= p of layer `layer` of weight(p - r) * row_r[j].
  void attend(const BatchMeta& meta, int s, int layer, int p, bool reverse, std::vector<float>& acc,
              std::vector<int32_t>& slots, std::vector<float>& ctx) {
    slots.resize(p + 1);
    for (int r = 0; r <= p; ++r) slots[r] = meta.slot_of(s, r);
    ctx.resize(static_cast<size_t>(p + 1) * kDim);
    cache_.read_rows(layer, slots, ctx.data());
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int k = 0; k <= p; ++k) {
      const int r = reverse ? p - k : k;
      for (int j = 0; j < kDim; ++j) acc[j] += weight(p - r) * ctx[static_cast<size_t>(r) * kDim + j];
    }
  }

  int n_vocab_;
  int max_context_;
  kv::LatentCache cache_;
};

}  // namespace mla::testing
