#pragma once
// Where a forward call's time goes: wall time and weight (and latent cache) bytes read per stage of
// the trunk, summed over calls, for `mla bench --profile`. Cheap enough to stay on: two clock reads
// per stage per layer.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "kernels/thread_pool.h"

namespace mla {

enum class Stage : int {
  Embed,      // embedding rows, rope tables
  AttnIn,     // attn_norm, the q and latent projections, rope, cache writes, the DSA indexer
  Attention,  // the MLA kernels (W_UK / W_UV and the cached rows they read)
  AttnOut,    // attn_output and the residual add
  Router,     // ffn_norm, the router matmul and expert selection
  Experts,    // routed experts: activation quantization, gate/up, SwiGLU, down, the weighted sum
  DenseFfn,   // a dense layer's FFN, or a MoE layer's shared experts
  Head,       // output_norm and the output matrix
  kCount
};
constexpr int kStageCount = static_cast<int>(Stage::kCount);
constexpr const char* kStageNames[kStageCount] = {"embed",  "attn_in", "attention", "attn_out",
                                                  "router", "experts", "dense_ffn", "head"};

struct StageCounters {
  std::array<std::atomic<int64_t>, kStageCount> ns{};
  std::array<std::atomic<int64_t>, kStageCount> bytes{};
  std::array<std::atomic<int64_t>, kStageCount> regions{};  // thread-pool regions (hand-offs)
  void add_bytes(Stage s, int64_t b) { bytes[static_cast<int>(s)].fetch_add(b, std::memory_order_relaxed); }
};

// Times its scope into counters under stage s, with the parallel regions pool ran in it, and
// makes s the stage that byte counts go to (*current); restores the previous stage on exit.
// counters == nullptr: does nothing (a rerun that must not be counted).
class StageTimer {
 public:
  StageTimer(StageCounters* counters, Stage s, Stage* current, const ThreadPool& pool)
      : counters_(counters), stage_(s), current_(current), prev_(*current), pool_(pool) {
    *current_ = s;
    if (!counters_) return;
    regions0_ = pool_.regions();
    t0_ = std::chrono::steady_clock::now();
  }
  ~StageTimer() {
    *current_ = prev_;
    if (!counters_) return;
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_);
    const int i = static_cast<int>(stage_);
    counters_->ns[i].fetch_add(ns.count(), std::memory_order_relaxed);
    counters_->regions[i].fetch_add(pool_.regions() - regions0_, std::memory_order_relaxed);
  }
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;

 private:
  StageCounters* counters_;
  Stage stage_;
  Stage* current_;
  Stage prev_;
  const ThreadPool& pool_;
  int64_t regions0_ = 0;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace mla
