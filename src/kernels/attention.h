#pragma once
// MLA attention of one sequence over its latent cache rows, by either exact path.
//
// Every context row is the latent [c_kv (kv_lora_rank) | k_pe (qk_rope)] of one token, c_kv
// normed and k_pe roped. Per head h:
//   MHA (decompressed): k_nope_j = W_UK_h · c_kv_j, v_j = W_UV_h · c_kv_j, then ordinary attention
//       with key [k_nope_j | k_pe_j] of qk_nope + qk_rope dims and value v_j of v_head_dim.
//   MQA (absorbed): q_lat = W_UK_hᵀ · q_nope, score_j = q_lat · c_kv_j + q_pe · k_pe_j,
//       o_lat = Σ_j p_j c_kv_j, out = W_UV_h · o_lat. All heads share the one latent "KV head".
// Both scale scores by kq_scale and are causal: query i (of n_q, the sequence's last n_q
// positions) sees context rows [0, n_ctx - n_q + i]. With a DSA selection (sel), query i attends to
// exactly its selected rows instead: the work per query is O(selected), not O(context); a
// selection of every visible row gives the dense result bit for bit.
//
// The context is read in the cache's own dtype (F32, F16, BF16, Q8_0, ...). MQA converts a tile
// of rows at a time, once for all the heads that use it, and splits one query's rows into fixed
// 256-row splits folded in a fixed order (flash-decoding), so one long sequence uses every thread;
// MHA decompresses one 64-row key block per head at a time into a per-thread tile and folds it
// into the running softmax state of every query that sees it (flash attention, in
// attention_mha.cpp). Every reduction has a fixed order that depends only on the query's rows, so
// results do not depend on the thread count, on how a prompt was chunked, or on other sequences
// in the batch.
#include <cstdint>
#include <vector>

#include "kernels/thread_pool.h"
#include "util/ggml_type.h"

namespace mla {

// One MLA projection [n_head][rows][cols]: rows of `cols` elements of one dtype, head h's rows
// starting head_rows rows after head h-1's. A plain float pointer is the packed F32 array (row_bytes
// 0: cols floats per row, head_rows 0: rows per head). The kernels convert a quantized, F16 or BF16
// head's rows with the same dequantization the load-time F32 copy used, so the values, and every
// result, are bit for bit those of the F32 copy. (The exact MQA kernel dots Q8_0 and Q6_K rows from
// their integer levels and scales, whose products are exactly those values: attention_exact.cpp.)
struct MlaProj {
  const void* data = nullptr;
  GgmlType type = GgmlType::F32;
  int64_t row_bytes = 0;  // 0: packed F32 rows
  int64_t head_rows = 0;  // 0: packed heads
  MlaProj() = default;
  MlaProj(const float* f32) : data(f32) {}  // NOLINT: implicit on purpose (the F32 form)
  MlaProj(const void* d, GgmlType t, int64_t rb, int64_t hr) : data(d), type(t), row_bytes(rb), head_rows(hr) {}
  explicit operator bool() const { return data != nullptr; }
  // The projection from head h0 on (heads of `rows` rows of `cols` elements); empty stays empty.
  MlaProj from_head(int64_t h0, int64_t rows, int64_t cols) const {
    if (!data) return {};
    const int64_t rb = row_bytes ? row_bytes : cols * static_cast<int64_t>(sizeof(float));
    return {static_cast<const uint8_t*>(data) + h0 * (head_rows ? head_rows : rows) * rb, type, row_bytes, head_rows};
  }
};

// Head h's rows [0, rows) of w as F32 rows of cols floats: w's own memory when it holds packed F32
// rows, else converted into buf (rows * cols floats), which is then returned.
const float* mla_proj_head(const MlaProj& w, int64_t h, int64_t rows, int64_t cols, float* buf);

struct MlaAttnParams {
  int64_t n_head = 0;
  int64_t qk_nope = 0;  // qk_nope_head_dim
  int64_t qk_rope = 0;  // qk_rope_head_dim
  int64_t kv_lora = 0;  // kv_lora_rank
  int64_t v_dim = 0;    // v_head_dim
  float kq_scale = 1;   // mscale² / sqrt(qk_nope + qk_rope)

  int64_t n_q = 0;           // query tokens of this sequence
  const float* q = nullptr;  // [n_q][n_head][qk_nope | qk_rope], q_pe roped; tokens q_stride apart
  int64_t q_stride = 0;

  int64_t n_ctx = 0;                    // context rows, n_ctx >= n_q
  const void* cache = nullptr;          // latent arena of this layer
  GgmlType cache_type = GgmlType::F32;  // its rows' dtype
  int64_t cache_row_bytes = 0;          // bytes between consecutive slots
  const int32_t* slots = nullptr;       // [n_ctx]: the slot of context row j

  // The projections, F32 or rows of the file in its type (converted a head at a time in the kernel):
  MlaProj w_uk;    // MQA: [n_head][kv_lora][qk_nope] (GGUF attn_k_b); may be empty for MHA
  MlaProj w_uk_t;  // MHA: [n_head][qk_nope][kv_lora] (attn_kv_b K rows); may be empty for MQA
  MlaProj w_uv;    // [n_head][v_dim][kv_lora] (attn_v_b, or attn_kv_b V rows)

  // Sparse attention (DSA): query i attends to context rows sel[i * sel_stride + k] for
  // k < sel_count[i], ascending and visible to it. nullptr: every visible row (dense).
  const int32_t* sel = nullptr;
  const int32_t* sel_count = nullptr;
  int64_t sel_stride = 0;

  float* out = nullptr;  // [n_q][n_head][v_dim]; tokens out_stride apart
  int64_t out_stride = 0;
};

// Work buffers; grown on first use to the largest sizes seen.
struct AttnScratch {
  std::vector<std::vector<float>> per_thread;
  std::vector<float> q_t;                 // MQA: absorbed, scaled queries, transposed to [row elem][head]
  std::vector<float> partials;            // MQA: per query and 1024-row part: max, sum, output per head
  std::vector<std::vector<float>> heads;  // per thread: one head's projection rows converted to F32
  // The exact kernels' buffers (attention_exact.cpp), in double.
  std::vector<std::vector<double>> exact_per_thread;
  std::vector<double> exact_q;                   // MQA: absorbed, scaled queries [query][row elem][head]
  std::vector<double> exact_parts;               // MQA: per query and part: max, sum, output per head
  std::vector<std::vector<int64_t>> exact_rows;  // MHA, per thread: each query's selection cursor, a block's queries
};

void mla_attention_mha(const MlaAttnParams& p, ThreadPool& pool, AttnScratch& scratch);
void mla_attention_mqa(const MlaAttnParams& p, ThreadPool& pool, AttnScratch& scratch);

// The same two paths computed in double and rounded to F32 once (attention_exact.cpp): the
// result is the F32 value nearest the exact one, so both paths give the same bits (but for an
// output within ~1e-15 of a rounding midpoint), on every build target. The model's default
// (--attention-precision exact); the F32 kernels above differ between the paths by an ulp or two, which
// the next matmul's activation quantization can turn into a 1e-3 difference.
void mla_attention_mha_exact(const MlaAttnParams& p, ThreadPool& pool, AttnScratch& scratch);
void mla_attention_mqa_exact(const MlaAttnParams& p, ThreadPool& pool, AttnScratch& scratch);

// Scalar references: plain loops from the definitions, double accumulation.
void mla_attention_mha_ref(const MlaAttnParams& p);
void mla_attention_mqa_ref(const MlaAttnParams& p);

}  // namespace mla
