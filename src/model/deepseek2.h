#pragma once
// The deepseek2 forward pass on CPU:
//   embed ─▶ [rmsnorm ─▶ MLA attention ─▶ rmsnorm ─▶ dense FFN | MoE] × n_layer ─▶ rmsnorm ─▶ lm_head
// driven by a BatchMeta and a LatentCache. All buffers are sized at construction for
// max_batch_tokens; a forward call allocates nothing once the attention scratch has grown to
// the longest context seen.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/thread_pool.h"
#include "kv/latent_cache.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/weights.h"

namespace mla {

class GgufFile;

struct ModelOptions {
  int n_threads = 1;
  int64_t max_batch_tokens = 512;  // most tokens one forward call may carry
  bool verify_paths = false;       // run both MLA paths per layer and log their largest difference
};

class Deepseek2Model {
 public:
  // c and w must outlive the model (w points into the GGUF mapping).
  Deepseek2Model(const DeepseekConfig& c, const DeepseekWeights& w, const ModelOptions& opt);

  // Writes every batch token's latent row into `cache` (slot_mapping) and, for each row listed
  // in b.logits_rows, n_vocab logits into logits (row-major, in logits_rows order).
  // Throws mla::Error when the batch is inconsistent or does not fit the cache or the buffers.
  void forward(const BatchMeta& b, LatentCache& cache, float* logits);

  const DeepseekConfig& config() const { return c_; }
  ThreadPool& pool() { return pool_; }
  // A cache shaped for this model.
  LatentCache make_cache(int64_t n_slots) const { return LatentCache(c_.n_layer, n_slots, c_.latent_dim); }

 private:
  void validate(const BatchMeta& b, const LatentCache& cache) const;
  void attention(int64_t il, const BatchMeta& b, LatentCache& cache);
  void run_mla_path(int64_t il, const BatchMeta& b, const SeqMeta& s, MlaPath path, LatentCache& cache, float* out);
  void dense_ffn(const LayerWeights& L, int64_t n_rows);
  void moe_ffn(const LayerWeights& L, int64_t n_rows);
  void mm(const WeightMatrix& w, const float* x, int64_t x_stride, int64_t n, float* y, int64_t y_stride);

  const DeepseekConfig& c_;
  const DeepseekWeights& w_;
  ModelOptions opt_;
  ThreadPool pool_;
  MatmulScratch mm_scratch_;
  AttnScratch attn_scratch_;

  // Activations, max_batch_tokens rows each (widths in comments).
  std::vector<float> x_;          // n_embd: the residual stream
  std::vector<float> h_;          // n_embd: normed input of a sub-block
  std::vector<float> q_a_;        // q_lora_rank
  std::vector<float> q_;          // n_head * qk_head
  std::vector<float> kv_;         // latent_dim
  std::vector<float> attn_;       // n_head * v_head
  std::vector<float> attn_alt_;   // n_head * v_head (verify_paths)
  std::vector<float> proj_;       // n_embd: a sub-block's output
  std::vector<float> gate_, up_;  // max(n_ff, shared ffn, 2 * n_ff_exp)
  std::vector<float> cos_, sin_;  // qk_rope / 2 per token
  // MoE routing and expert gather buffers.
  std::vector<float> router_;     // n_expert per token
  std::vector<int32_t> sel_experts_;  // n_expert_used per token
  std::vector<float> sel_weights_;    // n_expert_used per token
  std::vector<float> route_scratch_;
  std::vector<int32_t> expert_offsets_;  // n_expert + 1
  std::vector<int32_t> expert_cursor_;   // n_expert
  std::vector<int32_t> expert_rows_;     // token * n_expert_used + k, grouped by expert
  std::vector<float> ex_in_, ex_out_;    // n_embd per gathered row
};

// A deepseek2 file with its config and bound weights.
struct Deepseek2Bundle {
  std::unique_ptr<GgufFile> file;
  DeepseekConfig config;
  DeepseekWeights weights;
  ~Deepseek2Bundle();
};

// Which W_UK forms to derive for a path policy (verify needs both).
WeightLoadOptions weight_options_for(MlaPathPolicy policy, bool verify_paths);
std::unique_ptr<Deepseek2Bundle> load_deepseek2(const std::string& path, const WeightLoadOptions& opt);

}  // namespace mla
