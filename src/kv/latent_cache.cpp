#include "kv/latent_cache.h"

#include <fmt/format.h>

#include <cctype>
#include <cstdlib>
#include <cstring>

#include "quant/quant.h"
#include "util/error.h"

namespace mla {

void check_cache_dtype(GgmlType dtype, const LatentShape& shape) {
  switch (dtype) {
    case GgmlType::F16:
    case GgmlType::F32:
    case GgmlType::BF16:
      return;
    case GgmlType::Q8_0:
      if (shape.row_elems() % 32 != 0)
        fail(
            "kv cache dtype Q8_0 needs a latent row that is a multiple of 32 values, got {} "
            "(kv_lora_rank {} + qk_rope_head_dim {})",
            shape.row_elems(), shape.kv_lora_rank, shape.qk_rope_head_dim);
      return;
    default:
      fail("kv cache dtype {} is not supported (expected f16, f32, bf16 or q8_0)", ggml_type_name(dtype));
  }
}

GgmlType parse_cache_dtype(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "f16") return GgmlType::F16;
  if (lower == "f32") return GgmlType::F32;
  if (lower == "bf16") return GgmlType::BF16;
  if (lower == "q8_0") return GgmlType::Q8_0;
  fail("unknown kv cache dtype '{}' (expected f16, f32, bf16 or q8_0)", name);
}

int64_t bytes_per_token_per_layer(const LatentShape& shape, GgmlType dtype) {
  check_cache_dtype(dtype, shape);
  return ggml_row_bytes(dtype, shape.row_elems());
}

GgmlType index_key_dtype(GgmlType cache_dtype) {
  return cache_dtype == GgmlType::F32 || cache_dtype == GgmlType::BF16 ? cache_dtype : GgmlType::F16;
}

int64_t bytes_per_token_all_layers(const LatentShape& shape, GgmlType dtype) {
  int64_t total = bytes_per_token_per_layer(shape, dtype) * shape.n_layer;
  for (int l = 0; l < shape.n_layer; ++l)
    if (shape.index_key_dim(l) > 0) total += ggml_row_bytes(index_key_dtype(dtype), shape.index_key_dim(l));
  return total;
}

int32_t blocks_for_capacity(const LatentShape& shape, GgmlType dtype, int block_size, int64_t tokens,
                            int64_t memory_bytes) {
  if (block_size < 1) fail("kv cache: block size must be >= 1, got {}", block_size);
  int64_t n_blocks = 0;
  if (tokens > 0) {
    n_blocks = (tokens + block_size - 1) / block_size;
  } else {
    int64_t per_block = bytes_per_token_all_layers(shape, dtype) * block_size;
    n_blocks = memory_bytes / per_block;
    if (n_blocks < 1)
      fail(
          "kv cache: {} bytes of memory is less than one block ({} bytes = {} tokens x {} B "
          "over {} layers)",
          memory_bytes, per_block, block_size, bytes_per_token_all_layers(shape, dtype), shape.n_layer);
  }
  if (n_blocks > INT32_MAX / block_size)
    fail("kv cache: {} blocks of {} tokens is more than the {} slots a cache can address", n_blocks, block_size,
         INT32_MAX);
  return static_cast<int32_t>(n_blocks);
}

void LatentCache::FreeDeleter::operator()(uint8_t* p) const { std::free(p); }

LatentCache::LatentCache(const LatentShape& shape, GgmlType dtype, int block_size, int32_t n_blocks)
    : shape_(shape), dtype_(dtype), block_size_(block_size), n_blocks_(n_blocks), index_dtype_(index_key_dtype(dtype)) {
  if (shape.n_layer < 1 || shape.kv_lora_rank < 1 || shape.qk_rope_head_dim < 0)
    fail("kv cache: bad latent shape (n_layer {}, kv_lora_rank {}, qk_rope_head_dim {})", shape.n_layer,
         shape.kv_lora_rank, shape.qk_rope_head_dim);
  if (block_size < 1 || n_blocks < 1)
    fail("kv cache: need block size >= 1 and at least one block, got {} and {}", block_size, n_blocks);
  row_bytes_ = bytes_per_token_per_layer(shape, dtype);
  const size_t arena = static_cast<size_t>(row_bytes_) * n_slots();
  const size_t padded = (arena + 63) / 64 * 64;
  for (int l = 0; l < shape.n_layer; ++l) {
    auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, padded));
    if (!p)
      fail("kv cache: cannot allocate {} bytes for layer {} ({} layers, {})", padded, l, shape.n_layer, describe());
    // Touched once here: the cache is resident from the start (a server's memory stays flat as the
    // block pool cycles through blocks), and no page faults land on the serving path.
    std::memset(p, 0, padded);
    arenas_.emplace_back(p);
  }
  if (!shape.index_key_dims.empty() && static_cast<int>(shape.index_key_dims.size()) != shape.n_layer)
    fail("kv cache: {} indexer key widths for {} layers", shape.index_key_dims.size(), shape.n_layer);
  index_row_bytes_.assign(shape.n_layer, 0);
  index_arenas_.resize(shape.n_layer);
  for (int l = 0; l < shape.n_layer; ++l) {
    if (shape.index_key_dim(l) <= 0) continue;
    index_row_bytes_[l] = ggml_row_bytes(index_dtype_, shape.index_key_dim(l));
    const size_t bytes = (static_cast<size_t>(index_row_bytes_[l]) * n_slots() + 63) / 64 * 64;
    auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, bytes));
    if (!p) fail("kv cache: cannot allocate {} bytes of indexer keys for layer {}", bytes, l);
    std::memset(p, 0, bytes);
    index_arenas_[l].reset(p);
  }
}

void LatentCache::write_index_row(int layer, int64_t slot, const float* key) {
  uint8_t* dst = index_arenas_[layer].get() + slot * index_row_bytes_[layer];
  const int n = shape_.index_key_dim(layer);
  if (index_dtype_ == GgmlType::F32)
    std::memcpy(dst, key, sizeof(float) * n);
  else
    quantize_row(index_dtype_, key, dst, n);
}

void LatentCache::read_index_rows(int layer, std::span<const int32_t> slots, float* out) const {
  const int n = shape_.index_key_dim(layer);
  const uint8_t* base = index_arenas_[layer].get();
  for (size_t i = 0; i < slots.size(); ++i) {
    const uint8_t* src = base + slots[i] * index_row_bytes_[layer];
    if (index_dtype_ == GgmlType::F32)
      std::memcpy(out + i * n, src, sizeof(float) * n);
    else
      dequantize_row(index_dtype_, src, out + i * n, n);
  }
}

std::string LatentCache::describe() const {
  const double mib = static_cast<double>(total_bytes()) / (1024.0 * 1024.0);
  int64_t index_bytes = 0;
  int n_index_layers = 0;
  for (int l = 0; l < shape_.n_layer; ++l) {
    index_bytes += index_row_bytes_[l];
    n_index_layers += index_row_bytes_[l] > 0;
  }
  const std::string index = n_index_layers == 0
                                ? std::string()
                                : fmt::format(" + indexer keys {} {} B/token over {} layers",
                                              ggml_type_name(index_dtype_), index_bytes, n_index_layers);
  return fmt::format("{}, block {}, {} blocks = {} tokens, {} B/token/layer x {} layers{} = {} B/token, {:.2f} {}",
                     ggml_type_name(dtype_), block_size_, n_blocks_, n_slots(), row_bytes_, shape_.n_layer, index,
                     bytes_per_token(), mib >= 1024 ? mib / 1024 : mib, mib >= 1024 ? "GiB" : "MiB");
}

// F16 / BF16 / Q8_0 go through the quant.h row converters (SIMD where the CPU has it; F16 and
// BF16 round to nearest even, exactly as the scalar conversions).
void LatentCache::write_row(int layer, int64_t slot, const float* row) {
  uint8_t* dst = row_data(layer, slot);
  if (dtype_ == GgmlType::F32)
    std::memcpy(dst, row, sizeof(float) * shape_.row_elems());
  else
    quantize_row(dtype_, row, dst, shape_.row_elems());
}

void LatentCache::read_rows(int layer, std::span<const int32_t> slots, float* out) const {
  const int n = shape_.row_elems();
  for (size_t i = 0; i < slots.size(); ++i) {
    const uint8_t* src = row_data(layer, slots[i]);
    if (dtype_ == GgmlType::F32)
      std::memcpy(out + i * n, src, sizeof(float) * n);
    else
      dequantize_row(dtype_, src, out + i * n, n);
  }
}

void LatentCache::copy_block(int32_t src, int32_t dst) {
  const size_t bytes = static_cast<size_t>(row_bytes_) * block_size_;
  for (int l = 0; l < shape_.n_layer; ++l) {
    std::memcpy(row_data(l, int64_t{dst} * block_size_), row_data(l, int64_t{src} * block_size_), bytes);
    if (const int64_t rb = index_row_bytes_[l]; rb > 0) {
      uint8_t* base = index_arenas_[l].get();
      std::memcpy(base + int64_t{dst} * block_size_ * rb, base + int64_t{src} * block_size_ * rb,
                  static_cast<size_t>(rb) * block_size_);
    }
  }
}

void LatentCache::read_block(int32_t block, uint8_t* out) const {
  const int64_t slot = int64_t{block} * block_size_;
  for (int l = 0; l < shape_.n_layer; ++l) {
    const size_t rows = static_cast<size_t>(row_bytes_) * block_size_;
    std::memcpy(out, row_data(l, slot), rows);
    out += rows;
    if (const int64_t rb = index_row_bytes_[l]; rb > 0) {
      std::memcpy(out, index_row_data(l, slot), static_cast<size_t>(rb) * block_size_);
      out += rb * block_size_;
    }
  }
}

void LatentCache::write_block(int32_t block, const uint8_t* in) {
  const int64_t slot = int64_t{block} * block_size_;
  for (int l = 0; l < shape_.n_layer; ++l) {
    const size_t rows = static_cast<size_t>(row_bytes_) * block_size_;
    std::memcpy(row_data(l, slot), in, rows);
    in += rows;
    if (const int64_t rb = index_row_bytes_[l]; rb > 0) {
      std::memcpy(index_row_data(l, slot), in, static_cast<size_t>(rb) * block_size_);
      in += rb * block_size_;
    }
  }
}

}  // namespace mla
