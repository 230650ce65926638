#include "kernels/path_cost.h"

namespace mla {

MlaPath cheaper_prefill_path(int64_t kv_lora, int64_t qk_nope, int64_t qk_rope, int64_t v_head, bool exact_kernels) {
  // Effective GMAC/s of each kernel per (query, row) pair and head, counting only the pair's own
  // multiply-adds (below; MQA's absorb and MHA's decompression are inside the rates), from
  // attn/exact/mqa_chunk and attn/exact/mha_chunk (512-token chunks at GLM-5 widths, depth 2048,
  // one thread, CPU time; mla_bench and mla_bench_avx2; docs/PERF.md) and attn/mqa_chunk and
  // attn/mha_chunk for the F32 kernels. The rates are the build target's, fixed for a binary, so
  // the choice depends on the model's widths only, never on a chunk's length.
#if defined(__AVX512F__)
  // Zen 5, AVX-512: exact MQA 27.4, MHA 21.2 (issue 26, third pass, best of two runs; the first
  // pass read 36.1 and 23.8); F32 MQA 58.3, MHA 39.3 (issue 25).
  const double kMqaGmacs = exact_kernels ? 27.4 : 58, kMhaGmacs = exact_kernels ? 21.2 : 39;
#else
  // Exact: the x86-64-v3 build on Zen 5, MQA 11.7, MHA 11.4 (issue 26, third pass; the first
  // read 18.1 and 12.7). F32: 2-core Zen 3, AVX2 + FMA, both kernels in 8-lane register tiles
  // (MQA 23.0 / 27.0, MHA 15.9 / 16.0 at depth 2048 / 8192).
  const double kMqaGmacs = exact_kernels ? 11.7 : 25, kMhaGmacs = exact_kernels ? 11.4 : 16;
#endif
  const double mqa = static_cast<double>(2 * kv_lora + qk_rope) / kMqaGmacs;
  const double mha = static_cast<double>(qk_nope + qk_rope + v_head) / kMhaGmacs;
  return mqa <= mha ? MlaPath::Mqa : MlaPath::Mha;
}

MlaPath cheaper_sparse_path(int64_t kv_lora, int64_t qk_nope, int64_t qk_rope, int64_t v_head, int64_t query_len,
                            int64_t context_len, int64_t n_selected) {
  // MHA decompresses every context row (qk_nope + v_head outputs of kv_lora each), then works on
  // qk_head + v_head per selected row; MQA absorbs and un-absorbs per query (the same
  // qk_nope + v_head by kv_lora) and works on 2 * kv_lora + qk_rope per row. Both paths are exact
  // for a selection, so the count alone decides.
  const int64_t proj = (qk_nope + v_head) * kv_lora;
  const int64_t mha = context_len * proj + n_selected * (qk_nope + qk_rope + v_head);
  const int64_t mqa = query_len * proj + n_selected * (2 * kv_lora + qk_rope);
  return mqa <= mha ? MlaPath::Mqa : MlaPath::Mha;
}

}  // namespace mla
