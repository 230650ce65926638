#pragma once
// Where a forward call's time goes: wall time and weight (and latent cache) bytes read per stage of
// the trunk, summed over calls, for `mla bench --profile` (model/observers.h's StageProfiler
// fills them). Cheap enough to stay on: two clock reads per stage per layer.
#include <array>
#include <atomic>
#include <cstdint>

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

}  // namespace mla
