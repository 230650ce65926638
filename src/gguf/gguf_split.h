#pragma once
// Splitting a GGUF model into shards and merging shards back, byte for byte as llama.cpp's
// llama-gguf-split does (its --split and --merge), so files move between the two tools freely.
//
// Split: shard 1 gets every metadata key of the input, then each shard gets split.no (UINT16,
// 0-based), split.tensors.count (INT32, total) and split.count (UINT16), in that order. Tensors
// keep their order; a new shard starts when --split-max-tensors tensors are in the current one,
// or (--split-max-size) when the current shard's tensor bytes, each rounded up to 32, would
// exceed the limit. Metadata size is not counted. Tensor data is padded to 32 bytes.
// Merge: shard 1's metadata with split.count moved to the end and set to 0, then every shard's
// tensors in shard order.
#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace mla {

struct GgufSplitOptions {
  uint64_t max_bytes = 0;              // > 0: split by size (--split-max-size), else by tensor count
  int max_tensors = 128;               // --split-max-tensors
  bool no_tensor_first_split = false;  // shard 1 holds only metadata
};

// "50G" → 50e9 bytes, "300M" → 300e6 (decimal units, as gguf-split counts). Throws on anything else.
uint64_t parse_split_size(const std::string& s);

// Indices into in.tensors() for each shard, in order. Throws if a shard would hold no tensors
// (a size limit below one tensor) or there would be more than 65535 shards.
std::vector<std::vector<size_t>> gguf_split_plan(const GgufFile& in, const GgufSplitOptions& o);

// Writes prefix-00001-of-0000N.gguf ... (replacing existing files); returns their paths.
std::vector<std::string> gguf_split_write(const GgufFile& in, const std::string& prefix, const GgufSplitOptions& o);

// Merges the split model `in` (opened from any shard) into `out`, which must not exist yet.
void gguf_merge_write(const GgufFile& in, const std::string& out);

}  // namespace mla
