#include "parallel/shard_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include "parallel/comm.h"

namespace mla {
namespace {

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14
#endif

class Walker {
 public:
  Walker(int rank, int n_ranks, bool prefault) : rank_(rank), n_ranks_(n_ranks), prefault_(prefault) {}

  // Rows [first, first + n) of w.
  void rows(const WeightMatrix& w, int64_t first, int64_t n, bool sharded) {
    if (!w.data || n <= 0) return;
    const int64_t bytes = n * w.row_bytes;
    (sharded ? out.sharded : out.replicated) += bytes;
    if (!prefault_) return;
    static const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const auto begin = reinterpret_cast<uintptr_t>(w.row(first)) & ~(page - 1);
    const auto end = reinterpret_cast<uintptr_t>(w.row(first)) + static_cast<uintptr_t>(bytes);
    // NOLINTNEXTLINE(performance-no-int-to-ptr): a page-aligned address inside the mapping
    void* at = reinterpret_cast<void*>(begin);
    if (madvise(at, end - begin, MADV_POPULATE_READ) != 0) madvise(at, end - begin, MADV_WILLNEED);
  }
  void whole(const WeightMatrix& w) { rows(w, 0, w.n_rows, false); }
  // Rows split by count over the ranks (attn_output, dense/shared FFN down).
  void split_rows(const WeightMatrix& w) {
    const ShardRange r = shard_range(w.n_rows, rank_, n_ranks_);
    rows(w, r.begin, r.size(), n_ranks_ > 1);
  }
  // Groups of rows_per_unit rows, split by units (heads, FFN columns, experts).
  void split_units(const WeightMatrix& w, int64_t n_units, int64_t rows_per_unit) {
    const ShardRange r = shard_range(n_units, rank_, n_ranks_);
    rows(w, r.begin * rows_per_unit, r.size() * rows_per_unit, n_ranks_ > 1);
  }

  ShardBytes out;

 private:
  int rank_, n_ranks_;
  bool prefault_;
};

}  // namespace

ShardBytes map_rank_shard(const DeepseekConfig& c, const DeepseekWeights& w, int rank, int n_ranks, bool prefault) {
  Walker k(rank, n_ranks, prefault);
  for (const LayerWeights& L : w.layers) {
    k.whole(L.attn_q_a);
    k.split_units(L.attn_q_b, c.n_head, c.qk_head);
    k.split_units(L.attn_q, c.n_head, c.qk_head);
    k.whole(L.attn_kv_a_mqa);
    k.split_rows(L.attn_output);
    for (const WeightMatrix* m : {&L.idx_q_b, &L.idx_k, &L.idx_proj}) k.whole(*m);
    if (!L.is_moe) {
      k.split_units(L.ffn_gate, c.n_ff, 1);
      k.split_units(L.ffn_up, c.n_ff, 1);
      k.split_rows(L.ffn_down);
      continue;
    }
    k.whole(L.ffn_gate_inp);
    const int64_t F = c.n_ff_exp;
    if (L.gate_up_merged) {
      k.split_units(L.ffn_gate_up_exps, c.n_expert, 2 * F);
    } else {
      k.split_units(L.ffn_gate_exps, c.n_expert, F);
      k.split_units(L.ffn_up_exps, c.n_expert, F);
    }
    k.split_units(L.ffn_down_exps, c.n_expert, c.n_embd);
    k.split_units(L.ffn_gate_shexp, F * c.n_expert_shared, 1);
    k.split_units(L.ffn_up_shexp, F * c.n_expert_shared, 1);
    k.split_rows(L.ffn_down_shexp);
  }
  if (rank == 0 && !w.output_tied) k.whole(w.output);
  return k.out;
}

}  // namespace mla
