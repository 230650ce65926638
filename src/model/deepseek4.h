#pragma once
// DeepSeek-V4 (`deepseek4`) forward pass on the CPU, full-sequence (prefill) form: one sequence
// from position 0, every position's logits. The computation is docs/DEEPSEEK-V4.md §1 step by
// step: hyper-connection collapse → attention (q LoRA, one shared K=V head, tail RoPE, sliding
// window + compressed entries — HCA all visible, CSA the lightning indexer's top-k — with a
// per-head sink, inverse RoPE on the output, grouped output projection) → hyper-connection expand
// → the same around the MoE (sqrtsoftplus scores, hash or top-k routing, clipped SwiGLU) → hyper
// head → output norm → lm head.
//
// Not here yet: a compressed KV cache and token-by-token decode, batching of several sequences,
// the engine's BatchMeta interface. The pass recomputes every compressed entry from the prompt.
#include <cstdint>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/thread_pool.h"
#include "model/deepseek4_config.h"
#include "model/deepseek4_weights.h"

namespace mla {

class Deepseek4Model {
 public:
  Deepseek4Model(const Deepseek4Config& c, const Deepseek4Weights& w, int n_threads);

  // logits[t * n_vocab + v] for every position t of tokens (positions 0..n-1). Token ids are
  // checked against n_vocab (mla::Error).
  void prefill(const std::vector<int32_t>& tokens, float* logits);

 private:
  struct Mix;  // one hyper-connection's per-token coefficients
  void hc_collapse(const Ds4HyperConn& hc, const float* streams, int64_t n_tok, Mix& mix, float* x);
  void hc_expand(const Mix& mix, const float* y, int64_t n_tok, float* streams);
  void attention(int64_t il, const float* h, int64_t n_tok, float* out);
  void compress(int64_t il, const Ds4Compressor& k, int64_t dim, int64_t n_series, const float* h, int64_t n_tok,
                std::vector<float>& entries);
  void indexer_topk(int64_t il, const float* h, const float* qr, int64_t n_tok, std::vector<int32_t>& selected,
                    std::vector<int32_t>& n_selected);
  void attend(int64_t il, const float* q, const float* kv, const std::vector<float>& comp,
              const std::vector<int32_t>& selected, const std::vector<int32_t>& n_selected, int64_t n_tok, float* o);
  void moe(int64_t il, const float* x, const std::vector<int32_t>& tokens, float* out);
  void expert_ffn(const WeightMatrix& gate, const WeightMatrix& up, const WeightMatrix& down, float limit,
                  const float* x, int64_t n_tok, float* y);
  void head(const float* streams, int64_t n_tok, float* logits);

  const Deepseek4Config& c_;
  const Deepseek4Weights& w_;
  ThreadPool pool_;
  MatmulScratch scratch_;
};

}  // namespace mla
