#pragma once
// Which MLA attention kernel is cheaper for a piece of work: the measured rate of each kernel on
// this build target (prefill), or the multiply-add count of each path (a DSA selection). The
// model's one path decision (Deepseek2Model::mla_path) asks these; nothing here depends on a
// batch's length, so a query's path (and its bits) never depends on how a prompt was chunked.
#include <cstdint>

namespace mla {

// How one sequence's queries attend in an MLA layer (kernels/attention.h): decompressed heads
// (MHA) or absorbed queries over the latent rows (MQA).
enum class MlaPath : uint8_t { Mha, Mqa };

// The path with the lower measured cost per (query, context row) pair for a model of these widths.
// MQA does 2 kv_lora + qk_rope multiply-adds per pair and head, MHA qk_nope + qk_rope + v_head
// plus the decompression of every context row; each kernel's sustained rate (bench/attention_bench.cpp
// at GLM-5 widths, one core, per build target) turns multiply-adds into time. It depends on the
// model and the binary alone. exact_kernels: the rates of the exact attention kernels (the
// default) or of the F32 ones.
MlaPath cheaper_prefill_path(int64_t kv_lora, int64_t qk_nope, int64_t qk_rope, int64_t v_head,
                             bool exact_kernels = true);

// The cheaper path for one sequence in a sparse (DSA) layer, by multiply-adds per head: query_len
// queries over context_len rows of which the queries selected n_selected in all.
MlaPath cheaper_sparse_path(int64_t kv_lora, int64_t qk_nope, int64_t qk_rope, int64_t v_head, int64_t query_len,
                            int64_t context_len, int64_t n_selected);

}  // namespace mla
