// The deepseek4 dispatch trace: what one layer's attention read for a chunk (util/trace.h).
#include <algorithm>

#include "model/deepseek4_internal.h"
#include "util/trace.h"

namespace mla::ds4 {

void trace_attention(const Deepseek4Config& c, int64_t il, int64_t pos0, int64_t n_tok, int64_t window_rows,
                     int64_t n_entries, const std::vector<int32_t>& n_selected) {
  if (trace_dispatch_limit() <= 0) return;
  const Ds4Attn kind = c.attn_kind(il);
  Ds4DispatchTrace t;
  t.layer = static_cast<int>(il);
  t.kind = kind == Ds4Attn::Csa ? "csa" : kind == Ds4Attn::Hca ? "hca" : "sliding";
  t.pos0 = pos0;
  t.n_tok = n_tok;
  t.window_rows = window_rows;
  if (kind != Ds4Attn::Sliding) t.n_entries = n_entries;
  if (kind == Ds4Attn::Csa && n_tok > 0) {
    t.top_k = c.indexer_top_k;
    t.select_all = n_selected.empty();
    if (t.select_all) {  // query pos sees the entries w < (pos + 1) / m
      const int64_t m = c.compress_ratio[il];
      t.selected_min = std::min((pos0 + 1) / m, n_entries);
      t.selected_max = std::min((pos0 + n_tok) / m, n_entries);
    } else {
      const auto [lo, hi] = std::minmax_element(n_selected.begin(), n_selected.end());
      t.selected_min = *lo;
      t.selected_max = *hi;
    }
  }
  trace_ds4_dispatch(t);
}

}  // namespace mla::ds4
