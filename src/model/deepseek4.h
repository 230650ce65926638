#pragma once
// DeepSeek-V4 (`deepseek4`) forward pass on the CPU for one sequence: a chunk of tokens after the
// n_past already in its cache (a whole prompt, a part of one, or one decode token), every
// position's logits, the cache advanced. The computation is docs/DEEPSEEK-V4.md §1 step by
// step: hyper-connection collapse → attention (q LoRA, one shared K=V head, tail RoPE, sliding
// window + compressed entries — HCA all visible, CSA the lightning indexer's top-k — with a
// per-head sink, inverse RoPE on the output, grouped output projection) → hyper-connection expand
// → the same around the MoE (sqrtsoftplus scores, hash or top-k routing, clipped SwiGLU) → hyper
// head → output norm → lm head.
//
// The engine runs the sequences of a step through forward_batch(), each over its own cache
// (engine/deepseek4_runner.h).
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/thread_pool.h"
#include "model/deepseek4_cache.h"
#include "model/deepseek4_config.h"
#include "model/deepseek4_weights.h"

namespace mla {

// What one sequence's cache holds at most, in bytes (the F32 rows' storage, not the vectors'
// headers): a fixed part — the W - 1 window rows, each compressor's open window (m rows of kv and
// gate) and CSA carry-over (the last window's series A) — plus a part that grows with its tokens,
// the compressed entries (d / m floats per token and layer, indexer keys c^I / m more on CSA
// layers), counted twice for the storage's growth by doubling. A cache of n tokens holds at most
// fixed_bytes + n * bytes_per_token.
struct Ds4StateBound {
  int64_t fixed_bytes = 0;
  double bytes_per_token = 0;
};
Ds4StateBound deepseek4_state_bound(const Deepseek4Config& c);
// The bytes a cache's rows take now (their vectors' capacities).
int64_t deepseek4_state_bytes(const Deepseek4Cache& cache);

class Deepseek4Model {
 public:
  Deepseek4Model(const Deepseek4Config& c, const Deepseek4Weights& w, int n_threads);

  Deepseek4Cache make_cache() const;

  // Runs tokens at positions cache.n_past.. and advances the cache; logits[t * n_vocab + v] for
  // every one of them. Token ids are checked against n_vocab (mla::Error).
  void forward(const std::vector<int32_t>& tokens, Deepseek4Cache& cache, float* logits);
  // The same with logits only for the tokens at indices rows (ascending, into tokens):
  // logits[i * n_vocab ...] for rows[i], each bit for bit what forward() gives that token (the
  // head is per token); logits may be null when rows is empty.
  void forward(const std::vector<int32_t>& tokens, Deepseek4Cache& cache, float* logits, std::span<const int32_t> rows);

  // forward() on a fresh cache: the full-sequence pass from position 0.
  void prefill(const std::vector<int32_t>& tokens, float* logits);

  // Several sequences in one pass (the engine's step): each seq's tokens run at positions
  // cache->n_past.. over its own cache, as forward(tokens, *cache, .., rows) would run them alone,
  // bit for bit — the matmuls and the MoE take every row of the batch at once (each output row
  // is computed the same whatever the other rows), the compressors, the indexer and the attention
  // run per sequence. logits: the rows of every seq in order, n_vocab floats each (may be null
  // when no seq asks for one). The caches must be distinct.
  struct Seq {
    std::span<const int32_t> tokens;
    Deepseek4Cache* cache = nullptr;
    std::span<const int32_t> rows;  // indices into tokens, ascending
  };
  void forward_batch(std::span<const Seq> seqs, float* logits);

  // Dense CSA (a diagnostic, off by default): CSA layers attend to every visible compressed entry
  // in index order instead of the lightning indexer's top-k (the indexer's keys are still kept, so
  // a cache may be continued either way). Where a query sees at most indexer_top_k entries the
  // two select the same set and agree to rounding: `mla doctor`'s sparse-vs-dense check.
  void set_csa_dense(bool on) { csa_dense_ = on; }
  bool csa_dense() const { return csa_dense_; }

 private:
  struct Mix;  // one hyper-connection's per-token coefficients
  void hc_collapse(const Ds4HyperConn& hc, const float* streams, int64_t n_tok, Mix& mix, float* x);
  void hc_expand(const Mix& mix, const float* y, int64_t n_tok, float* streams);
  struct Chunk {  // one sequence's tokens in a pass: positions pos0 .. pos0 + n_tok - 1, batch rows row0..
    int64_t pos0 = 0;
    int64_t n_tok = 0;
    int64_t row0 = 0;
  };
  void attention(int64_t il, const float* h, std::span<const Chunk> seqs, std::span<Deepseek4Cache* const> caches,
                 int64_t n_all, float* out);
  void compress(int64_t il, const Ds4Compressor& k, int64_t dim, int64_t n_series, const float* kv, const float* gate,
                const Chunk& ch, Ds4CompressorState& st);
  void close_window(int64_t il, const Ds4Compressor& k, int64_t dim, int64_t n_series, Ds4CompressorState& st);
  void indexer_topk(int64_t il, float* q, const float* wts, const Chunk& ch, const Ds4CompressorState& st,
                    std::vector<int32_t>& selected, std::vector<int32_t>& n_selected);
  void attend(int64_t il, const float* q, const std::vector<float>& rows, int64_t rows_pos0, const Chunk& ch,
              const Ds4CompressorState& comp, const std::vector<int32_t>& selected,
              const std::vector<int32_t>& n_selected, float* o);
  void moe(int64_t il, const float* x, const std::vector<int32_t>& tokens, float* out);
  void expert_ffn(const WeightMatrix& gate, const WeightMatrix& up, const WeightMatrix& down, float limit,
                  const float* x, int64_t n_tok, float* y);
  void head(const float* streams, int64_t n_tok, float* logits);

  const Deepseek4Config& c_;
  const Deepseek4Weights& w_;
  ThreadPool pool_;
  MatmulScratch scratch_;
  bool csa_dense_ = false;
};

}  // namespace mla
