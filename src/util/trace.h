#pragma once
// Process-wide trace switches, set once from `--trace SPEC` or the MLA_TRACE environment variable.
//
// SPEC is a comma-separated list of `name:N` items. Known names:
//   dispatch:N  log the MLA path decision of each layer for its first N forward calls (deepseek4:
//               the attention branch of each layer, trace_ds4_dispatch)
//   tiers:N     log the first N prefix lookups that went on into the prefix cache's lower tiers
// Trace lines go through mla::log() (the single sink), at info level.
#include <cstdint>
#include <string_view>

namespace mla {

// Parses SPEC and replaces the current settings. Throws mla::Error on an unknown name or a bad N.
void trace_configure(std::string_view spec);
// Applies MLA_TRACE when it is set (and --trace was not given). Throws like trace_configure.
void trace_configure_from_env();
// Clears every switch and counter (tests).
void trace_reset();

// How many forward calls per layer the dispatch trace covers (0: off).
int trace_dispatch_limit();
// How many lookups the tiers trace covers in all (0: off).
int trace_tiers_limit();

// The hook after a prefix lookup that reached the lower tiers (kv/kv_manager.cpp). Logs
//   tiers lookup blocks=F arena=A host=H disk=D reused=R
// for the first trace_tiers_limit() calls: F full blocks in the prompt, A found in the KV cache,
// H and D loaded from host RAM and disk after them, R of those taken from the same sequence's
// previous lookup (it waited for blocks) rather than read again.
void trace_tiers(int n_full, int n_arena, int n_host, int n_disk, int n_reused);

// The hook at the MLA dispatch decision point of one layer. Logs
//   dispatch layer=blk.N is_sparse=0 num_mqa=A num_mha=B total_toks=T policy=P
// (sparse layers add `index_topk=K selected=S` after total_toks) for the first
// trace_dispatch_limit() calls of each layer; cheap when tracing is off. num_mqa / num_mha count
// the sequences sent down each path, total_toks the batch's tokens, selected the context rows the
// DSA indexer chose summed over the batch's queries. A batch with speculative verify rows adds
// `verify_mqa=V verify_mha=W`: those rows (last accepted token + drafts) by the path they took.
void trace_dispatch(int layer, bool is_sparse, int num_mqa, int num_mha, int total_toks, std::string_view policy,
                    int64_t index_topk = 0, int64_t selected = 0, int verify_mqa = 0, int verify_mha = 0);

// The deepseek4 hook at the attention branch of one layer (Deepseek4Model::attention, once the CSA
// selection is known). Logs, under the same per-layer limit as trace_dispatch,
//   dispatch layer=blk.N kind=K pos0=P n_tok=T window=R [entries=E [selected=A..B top_k=X select=S]]
// K is sliding, csa or hca; the chunk is positions P .. P + T - 1; R the sliding-window rows its
// queries read (cached rows and the chunk's own); entries (csa, hca) the compressed entries visible
// to the chunk's last query; selected (csa) the fewest and most entries a query of the chunk
// attends to, against the indexer's top_k; S is `indexer` (top-k by indexer score) or `all`
// (every visible entry in index order: Deepseek4Model::set_csa_dense).
struct Ds4DispatchTrace {
  int layer = 0;
  const char* kind = "";
  int64_t pos0 = 0, n_tok = 0, window_rows = 0;
  int64_t n_entries = -1;                                   // -1: a sliding-only layer (no entries field)
  int64_t selected_min = -1, selected_max = -1, top_k = 0;  // -1: not a CSA layer
  bool select_all = false;
};
void trace_ds4_dispatch(const Ds4DispatchTrace& t);

}  // namespace mla
