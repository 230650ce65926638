#pragma once
// The DSA lightning indexer's selection (DeepSeek-V3.2, GLM-5): for each query token t of a
// sequence and each context token s it may see,
//   score[t, s] = Σ_h w[t, h] · ReLU(q[t, h, :] · k[s, :])
// (w already carries 1/sqrt(head_dim · n_head)), then the top_k context rows by score. A query
// that sees at most top_k rows selects all of them, so DSA equals dense attention there.
//
// The selection is a list of context row indices per query, ascending, which the MLA attention
// kernels take as the rows to attend to. Ties are broken towards the earlier row. Every score is
// computed the same way whatever the thread count or batch (one multiply-add chain per head over
// the key's dims in order, then the heads' weighted ReLUs summed in a fixed order), so the
// selection of a sequence does not depend on the rest of the batch. Keys are read in the cache's
// dtype, a tile of rows converted to F32 at a time and scored against all heads while in cache.
#include <cstdint>
#include <vector>

#include "kernels/thread_pool.h"
#include "util/ggml_type.h"

namespace mla {

struct IndexerParams {
  int64_t n_head = 0;    // indexer heads
  int64_t head_dim = 0;  // indexer head dim (roped on its first n_rot dims by the caller)
  int64_t top_k = 0;

  int64_t n_q = 0;           // query tokens: the sequence's last n_q positions
  const float* q = nullptr;  // [n_q][n_head][head_dim]; tokens q_stride apart
  int64_t q_stride = 0;
  const float* w = nullptr;  // [n_q][n_head] head weights; tokens w_stride apart
  int64_t w_stride = 0;

  int64_t n_ctx = 0;                  // context rows (n_ctx >= n_q); query i sees rows [0, n_ctx - n_q + i]
  const void* keys = nullptr;         // key of row j at keys + slots[j] * key_row_bytes, in key_type
  GgmlType key_type = GgmlType::F32;  // read in place, a tile of keys converted at a time
  int64_t key_row_bytes = 0;
  const int32_t* slots = nullptr;  // [n_ctx]

  int32_t* sel = nullptr;        // out: query i's rows at sel + i * sel_stride, ascending
  int64_t sel_stride = 0;        // >= min(top_k, n_ctx)
  int32_t* sel_count = nullptr;  // out: [n_q] rows selected per query
};

struct IndexerScratch {
  std::vector<std::vector<float>> scores;   // per thread: [n_ctx]
  std::vector<std::vector<int32_t>> order;  // per thread: [n_ctx]
  std::vector<std::vector<float>> work;     // per thread: key tile, head scores
  std::vector<float> q_t;                   // per query: q transposed to [dim][head]
};

void indexer_select(const IndexerParams& p, ThreadPool& pool, IndexerScratch& scratch);

// Reference: scores in double from the definition (all visible rows of query i, in row order).
void indexer_scores_ref(const IndexerParams& p, int64_t i, std::vector<double>& scores);

// The top_k of scores[0, n) (ties towards the lower index), ascending, into sel; returns the count.
int32_t top_k_rows(const float* scores, int64_t n, int64_t top_k, int32_t* order, int32_t* sel);

}  // namespace mla
