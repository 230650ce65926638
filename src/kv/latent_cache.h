#pragma once
// The MLA latent cache: per layer an arena of rows [c_kv (kv_lora_rank) | k_pe (qk_rope)], F32,
// addressed by slot index. Which slot holds which token is the caller's business (BatchMeta's
// slot mapping and per-sequence slot lists), so a block-table allocator plugs in on top.
#include <cstdint>
#include <vector>

namespace mla {

class LatentCache {
 public:
  // One arena of n_layer * n_slots * row_dim floats, allocated once.
  LatentCache(int64_t n_layer, int64_t n_slots, int64_t row_dim);

  int64_t n_layer() const { return n_layer_; }
  int64_t n_slots() const { return n_slots_; }
  int64_t row_dim() const { return row_dim_; }

  float* layer(int64_t il) { return data_.data() + il * n_slots_ * row_dim_; }
  const float* layer(int64_t il) const { return data_.data() + il * n_slots_ * row_dim_; }
  float* row(int64_t il, int64_t slot) { return layer(il) + slot * row_dim_; }

 private:
  int64_t n_layer_, n_slots_, row_dim_;
  std::vector<float> data_;
};

}  // namespace mla
