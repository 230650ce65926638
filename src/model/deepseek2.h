#pragma once
// The forward pass of the MLA-MoE family (deepseek2, deepseek32, glm-dsa) on CPU, a layer loop:
//   embed ─▶ [block: rmsnorm ─▶ (DSA indexer) ─▶ MLA attention ─▶ rmsnorm ─▶ dense FFN | MoE] × n_layer
//         ─▶ head: rmsnorm ─▶ lm_head
// The MTP (draft) layer runs the same embed, block and head on its own weights. With DSA on,
// layers that have a lightning indexer select each query's top_k context rows and both MLA paths
// attend to only those; shared layers (GLM-5.2) reuse the last full layer's choice. Whatever
// watches the forward (stage timing, path counters, --trace dispatch, --verify-paths, the doctor)
// is a ForwardObserver the loop calls at fixed points (model/forward_observer.h). Each call is
// driven by a BatchMeta and a LatentCache. All buffers are sized at construction for
// max_batch_tokens; a forward call allocates nothing once the attention scratch has grown to
// the longest context seen.
#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/attention.h"
#include "kernels/indexer.h"
#include "kernels/matmul.h"
#include "kernels/thread_pool.h"
#include "kv/latent_cache.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/forward_observer.h"
#include "model/model_comm.h"
#include "model/observers.h"
#include "model/path_verify.h"
#include "model/weights.h"

namespace mla {

class GgufFile;

struct ModelOptions {
  int n_threads = 1;
  int64_t max_batch_tokens = 512;  // most tokens one forward call may carry
  // After each forward call, run the same step again end to end with every sequence down the other
  // MLA path (same weights, kernels and inputs; this step's cache rows restored afterwards) and
  // compare attention outputs per layer and the logits: see PathVerifyLog.
  bool verify_paths = false;
  // The MLA attention kernels: exact (double inside, one rounding to F32: the two paths give the
  // same bits) or the F32 kernels (faster; the paths differ by an ulp, which quantized matmuls
  // downstream can amplify). The CLI's --attention-precision: f32 by default (the doctor: exact);
  // a model built in code without saying gets the exact kernels.
  bool exact_attention = true;
  bool dsa = true;   // DeepSeek Sparse Attention where the model has an indexer (--dsa)
  bool mtp = false;  // load the MTP (nextn) layer for speculative decoding (the runner)
  // The runner maps every page of the file at load (--no-prefault: pages are read on first use,
  // for files larger than memory); several ranks map their shard instead (src/parallel/).
  bool prefault = true;
  // --weights-memory: bytes for all weights; the routed experts beyond the resident tensors are
  // streamed from the file through an expert cache (model/expert_cache.h). 0: every weight resident.
  int64_t weights_memory = 0;
  ExpertEviction expert_eviction = ExpertEviction::Lfu;
  // With weights_memory: I/O threads reading ahead the experts predicted for the next layer
  // (ExpertCacheOptions::io_threads; the CLI's --expert-io-threads, default 2). 0: on demand only.
  int expert_io_threads = 0;
  // One more observer of every forward call (the doctor's probes; model/forward_observer.h),
  // after the model's own. Single process only. Must outlive the model.
  ForwardObserver* observer = nullptr;
  // Several processes (model/model_comm.h; src/parallel/ implements it over MPI): this rank
  // computes the routed experts of its shard_range(n_expert, rank, size), summed across ranks in
  // rank order (expert parallelism), and its shard_range(n_head, ...) attention heads and its share
  // of the output rows of attn_output, the dense FFNs and the shared experts, exchanged whole
  // (tensor parallelism): the results are the single-process forward's bit for bit. nullptr or
  // size 1: one process. Must outlive the model.
  ModelComm* comm = nullptr;
};

class Deepseek2Model {
 public:
  // c and w must outlive the model (w points into the GGUF mapping).
  Deepseek2Model(const DeepseekConfig& c, const DeepseekWeights& w, const ModelOptions& opt);
  ~Deepseek2Model();
  Deepseek2Model(const Deepseek2Model&) = delete;
  Deepseek2Model& operator=(const Deepseek2Model&) = delete;

  // Writes every batch token's latent row into `cache` (slot_mapping) and, for each row listed
  // in b.logits_rows, n_vocab logits into logits (row-major, in logits_rows order). logits may
  // be nullptr (a worker rank: rank 0 samples), then the lm_head is skipped.
  // Throws mla::Error when the batch is inconsistent or does not fit the cache or the buffers.
  // hidden (optional, [n_tokens][n_embd]): every batch row's final hidden state after the output
  // norm, the MTP layer's h input; then every row goes through the last layer (not only the
  // logits rows), which changes no row's values.
  void forward(const BatchMeta& b, LatentCache& cache, float* logits, float* hidden = nullptr);

  // The MTP (draft) layer over b: row t is the pair (h_in row t, b.token_ids[t]) at b.positions[t];
  // its latent row goes to the cache's MTP layer (layer n_layer) at b.slot_mapping[t], and each
  // sequence attends its context_slots in that layer (the caller lists positions 1..p: the MTP
  // layer has no row at position 0). h_out ([n_tokens][n_embd]) gets every row's normed output,
  // the h of a chained draft; logits ([logits_rows][n_vocab]) the draft logits. Needs has_mtp().
  void forward_mtp(const BatchMeta& b, const float* h_in, LatentCache& cache, float* logits, float* h_out);
  bool has_mtp() const { return w_.nextn.present; }

  const DeepseekConfig& config() const { return c_; }
  bool sparse() const { return opt_.dsa && c_.has_indexer; }
  const ModelOptions& options() const { return opt_; }
  // What the model's own observers (model/observers.h, path_verify.h) counted.
  const SparseCounters& sparse_counters() const { return path_counter_.sparse(); }
  const MoeCounters& moe_counters() const { return profiler_.moe(); }
  // The routed-expert cache's counters (all zero without --weights-memory).
  ExpertCacheCounters expert_cache_counters() const {
    return w_.expert_cache ? w_.expert_cache->counters() : ExpertCacheCounters{};
  }
  const StageCounters& stage_counters() const { return profiler_.stages(); }
  const PathCounters& path_counters() const { return path_counter_.paths(); }
  const PathVerifyLog& verify_log() const;  // empty unless ModelOptions::verify_paths
  // Registers one more observer of every forward call (after those already registered). Must
  // outlive the model.
  void add_observer(ForwardObserver* o) { observers_.push_back(o); }
  // The path `auto` sends prefill chunks of dense layers down (cheaper_prefill_path of the widths).
  MlaPath auto_prefill_path() const { return prefill_path_; }
  // The routed experts and attention heads this rank computes (all of them in a single process).
  ShardRange expert_range() const { return experts_; }
  ShardRange head_range() const { return heads_; }
  ThreadPool& pool() { return pool_; }
  int64_t parallel_regions() const { return pool_.regions(); }
  // An F32 cache of n_slots rows with one-slot blocks (slot = position for
  // single_sequence_batch); the engine makes its own paged cache from latent_shape().
  LatentCache make_cache(int64_t n_slots, GgmlType dtype = GgmlType::F32) const {
    return LatentCache(latent_shape(), dtype, 1, static_cast<int32_t>(n_slots));
  }
  // The latent row geometry a cache for this model needs.
  LatentShape latent_shape() const {
    // With the MTP layer loaded its latent rows are one more layer of the same cache (same slots,
    // same block tables), without indexer keys.
    const int n_cache_layers = static_cast<int>(c_.n_layer) + (has_mtp() ? 1 : 0);
    LatentShape s(n_cache_layers, static_cast<int>(c_.kv_lora_rank), static_cast<int>(c_.qk_rope));
    if (sparse()) {
      for (int64_t il = 0; il < c_.n_layer; ++il) s.index_key_dims.push_back(static_cast<int>(c_.indexer_key_dim(il)));
      if (has_mtp()) s.index_key_dims.push_back(0);
    }
    return s;
  }

 private:
  friend class PathVerifier;  // the verify rerun runs blocks and the head on its own state

  void validate(const BatchMeta& b, const LatentCache& cache) const;

  // ---- the forward's steps, shared by the trunk and the MTP layer ----
  // Embedding rows of b's tokens from `table` (any type, its scale applied) into dst, row stride
  // dst_stride; and each token's rope cos/sin, once for all layers.
  void embed(const WeightMatrix& table, const BatchMeta& b, float* dst, int64_t dst_stride);
  // Block il (weights L: trunk layer il, or the MTP block at il = n_layer) over the residual x_
  // (its first n_rows rows; every batch row goes through the attention): attn_norm, attention,
  // attn_output and the residual add, then the FFN. Returns the rows carried on: the last trunk
  // layer keeps only the logits rows unless keep_rows (hidden states wanted).
  int64_t block(const LayerWeights& L, int64_t il, bool sparse, const BatchMeta& b, LatentCache& cache, int64_t n_rows,
                bool keep_rows);
  // The final norm and the output matrix (the trunk's output_norm / output, or the MTP layer's
  // head_norm / head) over x_'s first n_rows rows. normed == nullptr: the rows are the logits rows
  // (normed into h_); else every row is normed into normed ([n_rows][n_embd]) and the rows listed
  // in logits_rows get logits. logits == nullptr: no output matrix.
  void head(const std::vector<float>& norm, const WeightMatrix& out, int64_t n_rows, float* normed,
            const std::vector<int32_t>* logits_rows, float* logits);

  // ---- observation (model/forward_observer.h) ----
  // Shows e to every observer; nothing during the verify rerun (other_run_).
  void notify(const ForwardEvent& e) {
    if (other_run_) return;
    for (ForwardObserver* o : observers_) o->on_forward(e);
  }
  // A stage of the forward, from construction to destruction (StageBegin / StageEnd).
  class StageScope {
   public:
    StageScope(Deepseek2Model& m, Stage s) : m_(m), s_(s) {
      m_.notify({.point = ForwardPoint::StageBegin, .stage = s});
    }
    ~StageScope() { m_.notify({.point = ForwardPoint::StageEnd, .stage = s_}); }
    StageScope(const StageScope&) = delete;
    StageScope& operator=(const StageScope&) = delete;

   private:
    Deepseek2Model& m_;
    Stage s_;
  };
  void count_weight_bytes(const WeightMatrix& w) {
    notify({.point = ForwardPoint::BytesRead, .bytes = w.n_rows * w.row_bytes});
  }

  // ---- attention ----
  // The MLA attention of block il (weights L; the cache layer il): a trunk layer, or the MTP
  // block (il = n_layer, never sparse).
  void attention(const LayerWeights& L, int64_t il, bool sparse, const BatchMeta& b, LatentCache& cache);
  // attention's steps: the queries of this rank's heads into q_ and the latent rows into kv_ and
  // the cache (both roped); the kernel calls the path decisions give (attn_calls_).
  void attention_inputs(const LayerWeights& L, int64_t il, const BatchMeta& b, LatentCache& cache);
  void plan_attention_calls(const BatchMeta& b, bool sparse);
  // The one MLA path decision: the path sequence s takes in this layer (dense or sparse) under
  // b.policy; during the verify rerun, the other one.
  MlaPath mla_path(const BatchMeta& b, const SeqMeta& s, bool sparse) const;
  // The DSA lightning indexer of layer il: writes this step's indexer keys into the cache and
  // each query's selected context rows into sel_ / sel_count_.
  void run_indexer(int64_t il, const BatchMeta& b, LatentCache& cache);
  // The context rows s's queries selected in this layer, summed (what a sparse layer's path costs).
  int64_t selected_rows(const SeqMeta& s) const;
  // Whether `auto` sends s's tokens down their phase's path (prompt tokens: the prefill path,
  // generated ones: MQA) rather than by the chunk's length: with the F32 attention kernels, whose
  // paths differ in the last bits, when the engine said where the prompt ends (SeqMeta::n_prompt).
  // Then a row's bits do not depend on how the prompt was chunked.
  bool phase_paths(const BatchMeta& b, const SeqMeta& s) const;
  // The sequence's context row j is the cache's slot ctx_slots[j], read in the cache's dtype.
  void run_mla_path(const LayerWeights& L, int64_t il, const SeqMeta& s, MlaPath path, const LatentCache& cache,
                    const int32_t* ctx_slots, bool sparse, float* out);

  // ---- FFN ----
  void ffn(const LayerWeights& L, int64_t n_rows);
  void dense_ffn(const LayerWeights& L, int64_t n_rows);
  // The MoE FFN (model/deepseek2_moe.cpp) of n_rows tokens into proj_: route_tokens, then per chunk
  // of tokens group_pairs, expert_ffns and sum_expert_outputs, then the shared experts.
  void moe_ffn(const LayerWeights& L, int64_t n_rows);
  // The router's top-k experts and weights of each token into sel_experts_ / sel_weights_.
  void route_tokens(const LayerWeights& L, int64_t n_rows);
  // Expert read-ahead (ExpertCache::read_ahead), in block il after its attention: layer il + 1's
  // router (its ffn_norm, gate matmul and selection, exactly as route_tokens) run on the residual
  // block il's FFN is about to read, for the rows layer il + 1's FFN will see; its experts, most
  // selected first, are read while block il's FFN and block il + 1's attention compute. Uses h_
  // and the routing buffers, which the FFN refills.
  void read_ahead_experts(int64_t il, const BatchMeta& b, int64_t n_rows, bool keep_rows);
  // The (token, expert) pairs p0 .. p0 + n_pairs - 1 grouped by expert (expert_offsets_,
  // expert_rows_, pair_pos_), and the expert bytes counted. Returns this rank's pairs [begin, end)
  // of the grouped order.
  ShardRange group_pairs(const LayerWeights& L, int64_t p0, int64_t n_pairs);
  // Tokens [c0, c1): the gate/up rows, SwiGLU and down rows of this rank's pairs `own`, into ex_out_.
  void expert_ffns(const LayerWeights& L, int64_t c0, int64_t c1, int64_t n_pairs, ShardRange own);
  // Tokens [c0, c1) (pairs from p0): the weighted sums of their routed experts' outputs into proj_,
  // continuing the previous rank's sums.
  void sum_expert_outputs(int64_t c0, int64_t c1, int64_t p0, ShardRange own);
  // The MoE input rows of tokens [c0, c1) for weights ws (one or two matrices), one row per
  // (token, expert) pair in the expert-grouped order: each token quantized once, then copied.
  std::array<QuantizedActivations, 2> expert_inputs(std::initializer_list<const WeightMatrix*> ws, int64_t c0,
                                                    int64_t c1, int64_t n_pairs);
  // For every routed expert e that has pairs (rows [expert_offsets_[e], expert_offsets_[e + 1]) of
  // act[i]): ys[i] rows = ws[i][e] · act[i] rows, out_rows outputs per row (ws[i] holds out_rows
  // rows per expert). One parallel region for all experts and matrices.
  // act[i] row 0 is pair act_row0 (pairs below it are not this rank's). Only this rank's experts.
  void expert_matmuls(std::initializer_list<const WeightMatrix*> ws, int64_t out_rows,
                      const std::array<QuantizedActivations, 2>& act, std::initializer_list<float*> ys,
                      int64_t act_row0 = 0);
  void mm(const WeightMatrix& w, const float* x, int64_t x_stride, int64_t n, float* y, int64_t y_stride);
  // mm of two matrices over the same input in one parallel region (matmul_multi).
  void mm2(const WeightMatrix& w1, float* y1, int64_t y1_stride, const WeightMatrix& w2, float* y2, int64_t y2_stride,
           const float* x, int64_t x_stride, int64_t n);
  // mm of this rank's share of w's output rows, then exchanged: every rank has all of y.
  void mm_split(const WeightMatrix& w, const float* x, int64_t x_stride, int64_t n, float* y, int64_t y_stride);
  // A SwiGLU FFN (dense layer or shared experts), its n_ff columns split across the ranks:
  // proj_ = down · swiglu(gate · h_, up · h_) for n rows.
  void swiglu_ffn(const WeightMatrix& gate, const WeightMatrix& up, const WeightMatrix& down, int64_t n_ff, int64_t n,
                  float* out);

  const DeepseekConfig& c_;
  const DeepseekWeights& w_;
  ModelOptions opt_;
  ThreadPool pool_;
  MatmulScratch mm_scratch_;
  AttnScratch attn_scratch_;

  // Activations, max_batch_tokens rows each (widths in comments).
  std::vector<float> x_;                   // n_embd: the residual stream
  std::vector<float> h_;                   // n_embd: normed input of a sub-block
  std::vector<float> q_a_;                 // q_lora_rank
  std::vector<float> q_;                   // n_head * qk_head
  std::vector<float> kv_;                  // latent_dim
  std::vector<float> attn_;                // n_head * v_head
  std::vector<float> proj_;                // n_embd: a sub-block's output
  std::vector<float> gate_, up_;           // max(n_ff, shared ffn, 2 * n_ff_exp)
  std::vector<float> cos_, sin_;           // qk_rope / 2 per token
  std::vector<AttentionCall> attn_calls_;  // attention(): the kernel calls of a layer
  MlaPath prefill_path_ = MlaPath::Mha;    // cheaper_prefill_path of the model's widths
  // The verify rerun runs (PathVerifier sets it): every path flipped, nothing observed.
  bool other_run_ = false;
  std::vector<float> mtp_in_;  // 2 * n_embd: the MTP layer's [enorm(embed) ; hnorm(h)] (has_mtp)
  // DSA: indexer activations, and each query's selected context rows (kept across layers: shared
  // layers reuse the last full layer's selection).
  std::vector<float> iq_;     // n_indexer_head * indexer_head_dim
  std::vector<float> ik_;     // indexer_head_dim
  std::vector<float> iw_;     // n_indexer_head
  std::vector<int32_t> sel_;  // indexer_top_k per token
  std::vector<int32_t> sel_count_;
  IndexerScratch idx_scratch_;
  // MoE routing and expert gather buffers.
  std::vector<float> router_;         // n_expert per token
  std::vector<int32_t> sel_experts_;  // n_expert_used per token
  std::vector<float> sel_weights_;    // n_expert_used per token
  std::vector<float> route_scratch_;
  std::vector<int32_t> expert_offsets_;   // n_expert + 1
  std::vector<int32_t> expert_cursor_;    // n_expert
  std::vector<int32_t> expert_rows_;      // token * n_expert_used + k, grouped by expert
  std::vector<float> ex_out_;             // n_embd per (token, expert) pair
  std::vector<int32_t> pair_pos_;         // a pair's row in the expert-grouped order
  std::vector<uint8_t> moe_act_[2];       // quantized MoE inputs per token (two weight types at most)
  std::vector<uint8_t> moe_pair_act_[2];  // the same, one row per pair
  int64_t pair_capacity_ = 0;             // rows of ex_out_ / gate_ / up_
  struct ExpertPiece {
    int32_t matrix, expert, row0;
  };
  std::vector<ExpertPiece> expert_pieces_;  // expert_matmuls' work list
  std::vector<int32_t> expert_list_;        // a chunk's experts with pairs (expert cache)
  std::vector<int32_t> expert_votes_;       // read_ahead_experts: tokens per predicted expert
  ExpertLease expert_lease_;                // where the expert cache put them
  ShardRange experts_;                      // this rank's routed experts
  ShardRange heads_;                        // this rank's attention heads
  std::vector<float> gather_scratch_;       // all_gather_columns' buffers

  // Observers, called in this order: the model's own, ModelOptions::observer, the verifier
  // (ModelOptions::verify_paths), then those added.
  StageProfiler profiler_{pool_};
  PathCounter path_counter_;
  DispatchTracer tracer_;
  std::unique_ptr<PathVerifier> verifier_;
  std::vector<ForwardObserver*> observers_;
};

// An MLA-MoE file (deepseek2, deepseek32 or glm-dsa) with its config and bound weights.
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
