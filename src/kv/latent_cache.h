#pragma once
// The paged latent KV cache: one arena per layer of n_blocks * block_size rows, each row the
// latent of one token, [c_kv (kv_lora_rank) | k_pe (qk_rope_head_dim)], stored as F16 (default),
// F32, BF16 or Q8_0. There is no separate K and V: MLA reconstructs both from this row.
//
// Models with the DSA lightning indexer (deepseek32, glm-dsa) also cache one indexer key per token
// in the layers that run an indexer: a second arena per such layer, addressed by the same slots
// (so the same block table pages it), in F32 for an F32 cache, BF16 for BF16, else F16.
//
// Slot s = block * block_size + offset addresses row s of every layer's arena. The model writes
// the rows of the tokens it computes (write_row); the attention kernels read the context rows in
// the stored type through row_data and the slots (read_rows converts rows to F32 for the doctor,
// the scripted runner and tests); the engine copies whole blocks for copy-on-write (copy_block).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/ggml_type.h"

namespace mla {

struct LatentShape {
  LatentShape() = default;
  LatentShape(int layers, int kv_lora, int rope, std::vector<int> index_dims = {})
      : n_layer(layers), kv_lora_rank(kv_lora), qk_rope_head_dim(rope), index_key_dims(std::move(index_dims)) {}
  int n_layer = 0;
  int kv_lora_rank = 0;             // c_kv width
  int qk_rope_head_dim = 0;         // k_pe width
  std::vector<int> index_key_dims;  // [n_layer] indexer key width per layer (0: none); empty: no indexer
  int row_elems() const { return kv_lora_rank + qk_rope_head_dim; }
  int index_key_dim(int layer) const { return index_key_dims.empty() ? 0 : index_key_dims[layer]; }
};

// How the engine sizes the cache (mla --kv-cache-*; the runner turns it into a LatentShape and a
// block count).
struct KvCacheOptions {
  GgmlType dtype = GgmlType::F16;  // --kv-cache-dtype
  int block_size = 16;             // tokens per block (CPU default; see docs/ARCHITECTURE.md)
  int64_t tokens = 0;              // --kv-cache-tokens; 0: from memory
  int64_t memory_bytes = 0;        // --kv-cache-memory; 0 with tokens 0: the default below
  // Without either: kDefaultTokens tokens, whatever the context length.
  static constexpr int64_t kDefaultTokens = 32768;
};

// The dtype of the indexer-key rows for a cache dtype: F32 and BF16 as they are, F16 otherwise.
GgmlType index_key_dtype(GgmlType cache_dtype);

// F16, F32, BF16 or Q8_0 (Q8_0 needs row_elems % 32 == 0). Throws mla::Error otherwise.
void check_cache_dtype(GgmlType dtype, const LatentShape& shape);
// Parses --kv-cache-dtype: "f16" | "f32" | "bf16" | "q8_0" (case-insensitive).
GgmlType parse_cache_dtype(std::string_view name);

// Bytes one token's latent row takes in one layer (DeepSeek-V3, F16: 576 * 2 = 1152).
int64_t bytes_per_token_per_layer(const LatentShape& shape, GgmlType dtype);
// Bytes one token takes in the whole cache: every layer's latent row plus its indexer key.
int64_t bytes_per_token_all_layers(const LatentShape& shape, GgmlType dtype);

// The number of blocks from --kv-cache-tokens (rounded up to whole blocks) or, when tokens <= 0,
// from --kv-cache-memory bytes (rounded down). Throws mla::Error when that is less than a block.
int32_t blocks_for_capacity(const LatentShape& shape, GgmlType dtype, int block_size, int64_t tokens,
                            int64_t memory_bytes);

class LatentCache {
 public:
  LatentCache(const LatentShape& shape, GgmlType dtype, int block_size, int32_t n_blocks);

  const LatentShape& shape() const { return shape_; }
  GgmlType dtype() const { return dtype_; }
  int block_size() const { return block_size_; }
  int32_t n_blocks() const { return n_blocks_; }
  int64_t n_slots() const { return int64_t{n_blocks_} * block_size_; }
  int64_t row_bytes() const { return row_bytes_; }
  int64_t bytes_per_token() const { return bytes_per_token_all_layers(shape_, dtype_); }  // all layers
  int64_t total_bytes() const { return bytes_per_token() * n_slots(); }
  // "F16, block 16, 4096 blocks = 65536 tokens, 1152 B/token/layer x 61 layers = 70272 B/token,
  // 4.29 GiB"
  std::string describe() const;

  // Stores row (row_elems floats) at slot of layer, converted to the cache dtype.
  void write_row(int layer, int64_t slot, const float* row);
  // out[i * row_elems ...] = row slots[i] of layer, as F32.
  void read_rows(int layer, std::span<const int32_t> slots, float* out) const;
  // The raw row (dtype layout, row_bytes bytes).
  const uint8_t* row_data(int layer, int64_t slot) const { return arenas_[layer].get() + slot * row_bytes_; }
  uint8_t* row_data(int layer, int64_t slot) { return arenas_[layer].get() + slot * row_bytes_; }

  // The layer's arena as F32 rows (row s at + s * row_elems) when the dtype is F32, else nullptr.
  const float* f32_rows(int layer) const {
    return dtype_ == GgmlType::F32 ? reinterpret_cast<const float*>(arenas_[layer].get()) : nullptr;
  }

  // Indexer keys (layers with shape().index_key_dim(layer) > 0): stored in index_key_dtype(dtype()).
  void write_index_row(int layer, int64_t slot, const float* key);
  // out[i * index_key_dim ...] = the key at slots[i], as F32.
  void read_index_rows(int layer, std::span<const int32_t> slots, float* out) const;
  GgmlType index_dtype() const { return index_dtype_; }
  int64_t index_row_bytes(int layer) const { return index_row_bytes_[layer]; }
  // The raw key at slot (index_dtype() layout, index_row_bytes(layer) bytes).
  const uint8_t* index_row_data(int layer, int64_t slot) const {
    return index_arenas_[layer].get() + slot * index_row_bytes_[layer];
  }
  uint8_t* index_row_data(int layer, int64_t slot) {
    return index_arenas_[layer].get() + slot * index_row_bytes_[layer];
  }
  // The layer's indexer keys as F32 rows when stored as F32, else nullptr.
  const float* f32_index_rows(int layer) const {
    return index_dtype_ == GgmlType::F32 ? reinterpret_cast<const float*>(index_arenas_[layer].get()) : nullptr;
  }

  // Every layer's rows of block src → block dst.
  void copy_block(int32_t src, int32_t dst);

  // One block's rows in every layer as one byte string, for the prefix cache's lower tiers
  // (kv/tier_store.h): per layer, block_size latent rows, then block_size indexer keys where the
  // layer has them. block_bytes() = bytes_per_token() * block_size.
  int64_t block_bytes() const { return bytes_per_token() * block_size_; }
  void read_block(int32_t block, uint8_t* out) const;
  void write_block(int32_t block, const uint8_t* in);

 private:
  struct FreeDeleter {
    void operator()(uint8_t* p) const;
  };
  LatentShape shape_;
  GgmlType dtype_;
  int block_size_;
  int32_t n_blocks_;
  int64_t row_bytes_;
  std::vector<std::unique_ptr<uint8_t, FreeDeleter>> arenas_;  // [n_layer], 64-byte aligned
  GgmlType index_dtype_;
  std::vector<int64_t> index_row_bytes_;                             // [n_layer]; 0: no indexer keys
  std::vector<std::unique_ptr<uint8_t, FreeDeleter>> index_arenas_;  // [n_layer]; null where none
};

}  // namespace mla
