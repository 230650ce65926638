#pragma once
// The forward pass of the MLA-MoE family (deepseek2, deepseek32, glm-dsa) on CPU:
//   embed ─▶ [rmsnorm ─▶ (DSA indexer) ─▶ MLA attention ─▶ rmsnorm ─▶ dense FFN | MoE] × n_layer
//         ─▶ rmsnorm ─▶ lm_head
// With DSA on, layers that have a lightning indexer select each query's top_k context rows and
// both MLA paths attend to only those; shared layers (GLM-5.2) reuse the last full layer's choice.
// driven by a BatchMeta and a LatentCache. All buffers are sized at construction for
// max_batch_tokens; a forward call allocates nothing once the attention scratch has grown to
// the longest context seen.
#include <array>
#include <atomic>
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
#include "model/model_comm.h"
#include "model/stage_counters.h"
#include "model/weights.h"

namespace mla {

class GgufFile;

// ---- observation hook (mla doctor, src/doctor/) ----
// After each layer's attention the forward shows an observer that step's intermediate rows. The
// pointers are valid only during the call. Unset (nullptr, the default): no cost.
struct AttentionObservation {
  int64_t layer = 0;
  const BatchMeta* batch = nullptr;
  const float* q = nullptr;            // [T][n_head][qk_nope | qk_rope], q_pe roped
  const float* latent = nullptr;       // [T][kv_lora_rank | qk_rope]: this step's rows in F32, before the cache
  const float* attn_out = nullptr;     // [T][n_head][v_head]: attention · W_UV (the attn_output input)
  const LatentCache* cache = nullptr;  // this step's rows already written
};
class AttentionObserver {
 public:
  virtual ~AttentionObserver() = default;
  virtual void on_attention(const AttentionObservation& o) = 0;
};
// ---- end of the observation hook ----

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
  AttentionObserver* observer = nullptr;  // see AttentionObservation; must outlive the model
  // Several processes (model/model_comm.h; src/parallel/ implements it over MPI): this rank
  // computes the routed experts of its shard_range(n_expert, rank, size), summed across ranks in
  // rank order (expert parallelism), and its shard_range(n_head, ...) attention heads and its share
  // of the output rows of attn_output, the dense FFNs and the shared experts, exchanged whole
  // (tensor parallelism): the results are the single-process forward's bit for bit. nullptr or
  // size 1: one process. Must outlive the model.
  ModelComm* comm = nullptr;
};

// Tokens that went through sparse (DSA) layers, summed over layers, and the context rows they
// attended to (for /metrics). Written by the forward's thread, read by anyone.
struct SparseCounters {
  std::atomic<int64_t> layer_tokens{0};
  std::atomic<int64_t> selected_rows{0};
};

// Bytes of routed-expert weight rows the MoE layers read (each expert that a forward call's
// tokens picked counted once per layer: its gate, up and down rows), for `mla bench`.
struct MoeCounters {
  std::atomic<int64_t> expert_bytes{0};
  std::atomic<int64_t> experts_run{0};
};

// The MLA paths the forward actually sent its queries down, counted at the one decision point
// (Deepseek2Model::mla_path, after every override: a sparse layer's cost rule, speculative verify
// rows). Trunk layers only (the MTP block is not counted); the --verify-paths rerun is not
// counted. The engine's n_tokens_mha / n_tokens_mqa, /metrics, `mla run --json`, `mla perplexity`
// and the doctor read these. Written by the forward's thread, read by anyone.
struct PathCounters {
  // Each forward call's tokens once, by the path their query took in layer 0. (Within one call
  // every trunk layer is dense, or every one sparse, and a sequence's decision is the same in each
  // of them; the per-layer counts below show it.)
  std::atomic<int64_t> tokens_mha{0}, tokens_mqa{0};
  // Tokens x layers, dense and sparse layers apart.
  std::atomic<int64_t> dense_layer_tokens_mha{0}, dense_layer_tokens_mqa{0};
  std::atomic<int64_t> sparse_layer_tokens_mha{0}, sparse_layer_tokens_mqa{0};
};

// ModelOptions::verify_paths: one entry per forward call (trunk), the primary run against the same
// step rerun with every sequence down the other path. Relative differences are max |p - o| / max
// |p| with p the primary's values (the absolute difference where p is all zeros; inf for a NaN).
struct PathVerifyStep {
  int64_t n_tokens = 0;
  double logits_rel = 0;     // the largest over the call's logits rows, each row on its own
  bool greedy_agree = true;  // each logits row's argmax is the other run's too (or a near tie: doctor's rule)
  int64_t worst_layer = 0;   // the layer whose attention output differs most
  double worst_layer_rel = 0;
};
struct PathVerifyLog {
  std::vector<PathVerifyStep> steps;
  std::vector<double> layer_rel;  // [n_layer] attention output, the largest over the steps
  double max_logits_rel() const;
  bool greedy_agree() const;
};

// The path `auto` gives prefill chunks for a model of these widths: the one with the lower
// measured cost per (query, context row) pair. MQA does 2 kv_lora + qk_rope multiply-adds per
// pair and head, MHA qk_nope + qk_rope + v_head plus the decompression of every context row; each
// kernel's sustained rate (bench/attention_bench.cpp at GLM-5 widths, one core, per build target)
// turns multiply-adds into time. It depends on the model and the binary alone, never on the chunk,
// so a query's path (and its bits) does not depend on how the scheduler cut the prompt.
// exact_kernels: the rates of the exact attention kernels (the default) or of the F32 ones.
MlaPath cheaper_prefill_path(int64_t kv_lora, int64_t qk_nope, int64_t qk_rope, int64_t v_head,
                             bool exact_kernels = true);

// How two runs of the MLA paths are compared (--verify-paths and the doctor): max |ref - other| /
// max |ref| over n values (max |ref - other| when ref is all zeros; inf when a difference is not
// finite), and whether other's argmax is ref's, or within 1e-3 max |other| of it (a near tie).
double path_rel_diff(const float* ref, const float* other, int64_t n);
bool path_greedy_agrees(const float* ref, const float* other, int64_t n);

class Deepseek2Model {
 public:
  // c and w must outlive the model (w points into the GGUF mapping).
  Deepseek2Model(const DeepseekConfig& c, const DeepseekWeights& w, const ModelOptions& opt);

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
  const SparseCounters& sparse_counters() const { return sparse_counters_; }
  const MoeCounters& moe_counters() const { return moe_counters_; }
  const StageCounters& stage_counters() const { return stage_counters_; }
  const PathCounters& path_counters() const { return path_counters_; }
  const PathVerifyLog& verify_log() const { return verify_log_; }
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
  void validate(const BatchMeta& b, const LatentCache& cache) const;
  // The MLA attention of block il (weights L; the cache layer il): a trunk layer, or the MTP
  // block (il = n_layer, never sparse).
  void attention(const LayerWeights& L, int64_t il, bool sparse, const BatchMeta& b, LatentCache& cache);
  // attention's steps: the queries of this rank's heads into q_ and the latent rows into kv_ and
  // the cache (both roped); the kernel calls the path decisions give (attn_calls_); what they
  // decided, counted and traced.
  void attention_inputs(const LayerWeights& L, int64_t il, const BatchMeta& b, LatentCache& cache);
  void plan_attention_calls(const BatchMeta& b, bool sparse);
  void count_attention_calls(int64_t il, bool sparse, const BatchMeta& b);
  // Trunk layer il over the residual x_ (its first n_rows rows; every batch row goes through the
  // attention). Returns the rows carried on: the last layer keeps only the logits rows unless
  // keep_rows (hidden states wanted).
  int64_t trunk_layer(int64_t il, const BatchMeta& b, LatentCache& cache, int64_t n_rows, bool keep_rows);
  // The output norm and lm_head over x_'s n_rows rows (the logits rows).
  void head(int64_t n_rows, float* logits);
  // verify_paths. The other run goes layer by layer beside the primary: after the primary's layer
  // il, the other run's layer il on its own residual (its state exchanged in by swap_run_state),
  // with the primary's cache rows of that layer saved before and restored after; later layers
  // never read layer il's rows, so this is the other policy's forward end to end on the same
  // inputs. verify_layer returns the other run's rows carried on; verify_finish_step compares the
  // logits and logs the step.
  void swap_run_state();
  int64_t verify_layer(int64_t il, const BatchMeta& b, LatentCache& cache, int64_t n_rows, PathVerifyStep& step);
  void verify_finish_step(const BatchMeta& b, const float* logits, PathVerifyStep& step);
  // The one MLA path decision: the path sequence s takes in this layer (dense or sparse) under
  // b.policy; during the verify rerun, the other one.
  MlaPath mla_path(const BatchMeta& b, const SeqMeta& s, bool sparse) const;
  void ffn(const LayerWeights& L, int64_t n_rows);
  // The DSA lightning indexer of layer il: writes this step's indexer keys into the cache and
  // each query's selected context rows into sel_ / sel_count_.
  void run_indexer(int64_t il, const BatchMeta& b, LatentCache& cache);
  // The path a sequence takes in a sparse layer under the auto policy: the cheaper one for its
  // query length, context and selection (both are exact). Only mla_path calls it.
  MlaPath sparse_path(const SeqMeta& s) const;
  // Whether `auto` sends s's tokens down their phase's path (prompt tokens: the prefill path,
  // generated ones: MQA) rather than by the chunk's length: with the F32 attention kernels, whose
  // paths differ in the last bits, when the engine said where the prompt ends (SeqMeta::n_prompt).
  // Then a row's bits do not depend on how the prompt was chunked.
  bool phase_paths(const BatchMeta& b, const SeqMeta& s) const;
  // The sequence's context row j is the cache's slot ctx_slots[j], read in the cache's dtype.
  void run_mla_path(const LayerWeights& L, int64_t il, const SeqMeta& s, MlaPath path, const LatentCache& cache,
                    const int32_t* ctx_slots, bool sparse, float* out);
  void dense_ffn(const LayerWeights& L, int64_t n_rows);
  // The MoE FFN (model/deepseek2_moe.cpp) of n_rows tokens into proj_: route_tokens, then per chunk
  // of tokens group_pairs, expert_ffns and sum_expert_outputs, then the shared experts.
  void moe_ffn(const LayerWeights& L, int64_t n_rows);
  // The router's top-k experts and weights of each token into sel_experts_ / sel_weights_.
  void route_tokens(const LayerWeights& L, int64_t n_rows);
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
  std::vector<float> x_;          // n_embd: the residual stream
  std::vector<float> h_;          // n_embd: normed input of a sub-block
  std::vector<float> q_a_;        // q_lora_rank
  std::vector<float> q_;          // n_head * qk_head
  std::vector<float> kv_;         // latent_dim
  std::vector<float> attn_;       // n_head * v_head
  std::vector<float> attn_ref_;   // n_head * v_head: the primary's (verify_paths)
  std::vector<float> proj_;       // n_embd: a sub-block's output
  std::vector<float> gate_, up_;  // max(n_ff, shared ffn, 2 * n_ff_exp)
  std::vector<float> cos_, sin_;  // qk_rope / 2 per token
  struct AttnCall {
    SeqMeta seq;       // a sequence, or one query of a verifying sequence in a sparse layer
    MlaPath path;      // mla_path's decision
    bool last_of_seq;  // the sequence's last call (what the trace counts sequences by)
  };
  std::vector<AttnCall> attn_calls_;     // attention(): the kernel calls of a layer
  MlaPath prefill_path_ = MlaPath::Mha;  // cheaper_prefill_path of the model's widths
  PathCounters path_counters_;
  // verify_paths: the rerun down the other paths (other_run_ set while it runs; nothing is counted,
  // traced or observed then) and its state: residual, DSA selection, logits, the primary's cache
  // rows of the layer being rerun.
  bool other_run_ = false;
  std::vector<float> x_other_;
  std::vector<int32_t> sel_other_, sel_count_other_;
  std::vector<float> logits_other_;
  std::vector<uint8_t> saved_rows_;
  std::vector<double> layer_rel_step_;  // [n_layer] this step's attention output differences
  PathVerifyLog verify_log_;
  std::vector<float> mtp_in_;  // 2 * n_embd: the MTP layer's [enorm(embed) ; hnorm(h)] (has_mtp)
  // DSA: indexer activations, and each query's selected context rows (kept across layers: shared
  // layers reuse the last full layer's selection).
  std::vector<float> iq_;     // n_indexer_head * indexer_head_dim
  std::vector<float> ik_;     // indexer_head_dim
  std::vector<float> iw_;     // n_indexer_head
  std::vector<int32_t> sel_;  // indexer_top_k per token
  std::vector<int32_t> sel_count_;
  IndexerScratch idx_scratch_;
  SparseCounters sparse_counters_;
  MoeCounters moe_counters_;
  StageCounters stage_counters_;
  Stage stage_ = Stage::Embed;  // the stage the weight bytes read now are counted under
  // Where a StageTimer counts (nowhere in the verify rerun).
  StageCounters* stage_sink() { return other_run_ ? nullptr : &stage_counters_; }
  void count_weight_bytes(const WeightMatrix& w) {
    if (!other_run_) stage_counters_.add_bytes(stage_, w.n_rows * w.row_bytes);
  }
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
  ShardRange experts_;                      // this rank's routed experts
  ShardRange heads_;                        // this rank's attention heads
  std::vector<float> gather_scratch_;       // all_gather_columns' buffers
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
