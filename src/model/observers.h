#pragma once
// The forward's standing observers (model/forward_observer.h), each a small object the model
// registers on itself: stage timing and bytes read (StageProfiler), the MLA path and DSA counters
// (PathCounter), `--trace dispatch` (DispatchTracer). The --verify-paths rerun is
// model/path_verify.h's PathVerifier; the doctor registers its own.
#include <atomic>
#include <chrono>
#include <cstdint>

#include "kernels/thread_pool.h"
#include "model/forward_observer.h"
#include "model/stage_counters.h"

namespace mla {

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

// Wall time, thread-pool regions and bytes read per stage (StageCounters), and the routed experts'
// bytes (MoeCounters). Bytes read outside any stage count under Embed.
class StageProfiler final : public ForwardObserver {
 public:
  explicit StageProfiler(const ThreadPool& pool) : pool_(pool) {}
  void on_forward(const ForwardEvent& e) override;
  const StageCounters& stages() const { return stages_; }
  const MoeCounters& moe() const { return moe_; }

 private:
  const ThreadPool& pool_;
  StageCounters stages_;
  MoeCounters moe_;
  Stage current_ = Stage::Embed;  // where bytes read now are counted
  int64_t regions0_ = 0;
  std::chrono::steady_clock::time_point t0_;
};

// What each trunk layer's path decisions sent down each path (PathCounters), and the DSA layers'
// tokens and selected rows (SparseCounters).
class PathCounter final : public ForwardObserver {
 public:
  explicit PathCounter(int64_t n_layer) : n_layer_(n_layer) {}
  void on_forward(const ForwardEvent& e) override;
  const PathCounters& paths() const { return paths_; }
  const SparseCounters& sparse() const { return sparse_; }

 private:
  int64_t n_layer_;
  PathCounters paths_;
  SparseCounters sparse_;
};

// `--trace dispatch`: one line per layer's decision (util/trace.h's trace_dispatch), the MTP block
// included.
class DispatchTracer final : public ForwardObserver {
 public:
  explicit DispatchTracer(int64_t index_top_k) : index_top_k_(index_top_k) {}
  void on_forward(const ForwardEvent& e) override;

 private:
  int64_t index_top_k_;
};

}  // namespace mla
