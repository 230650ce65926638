#include "model/observers.h"

#include "util/trace.h"

namespace mla {
namespace {

// A layer's kernel calls summed: sequences by path (a verifying one by its last query's path),
// speculative verify rows and tokens by path.
struct CallTally {
  int seqs_mqa = 0, seqs_mha = 0, verify_mqa = 0, verify_mha = 0;
  int64_t tokens_mqa = 0, tokens_mha = 0;
};

CallTally tally(std::span<const AttentionCall> calls) {
  CallTally t;
  for (const auto& [s, path, last] : calls) {
    const bool mqa = path == MlaPath::Mqa;
    if (last) ++(mqa ? t.seqs_mqa : t.seqs_mha);
    if (s.verify) (mqa ? t.verify_mqa : t.verify_mha) += s.query_len;
    (mqa ? t.tokens_mqa : t.tokens_mha) += s.query_len;
  }
  return t;
}

// The context rows a sparse layer's queries selected, summed over the batch.
int64_t selected_rows(const ForwardEvent& e) {
  int64_t n = 0;
  if (e.sparse)
    for (int64_t t = 0; t < e.batch->n_tokens(); ++t) n += e.sel_count[t];
  return n;
}

}  // namespace

void StageProfiler::on_forward(const ForwardEvent& e) {
  const int i = static_cast<int>(current_);
  switch (e.point) {
    case ForwardPoint::StageBegin:
      current_ = e.stage;
      regions0_ = pool_.regions();
      t0_ = std::chrono::steady_clock::now();
      break;
    case ForwardPoint::StageEnd: {
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_);
      stages_.ns[i].fetch_add(ns.count(), std::memory_order_relaxed);
      stages_.regions[i].fetch_add(pool_.regions() - regions0_, std::memory_order_relaxed);
      current_ = Stage::Embed;
      break;
    }
    case ForwardPoint::BytesRead:
      stages_.bytes[i].fetch_add(e.bytes, std::memory_order_relaxed);
      break;
    case ForwardPoint::ExpertsRun:
      moe_.experts_run.fetch_add(e.n_experts, std::memory_order_relaxed);
      moe_.expert_bytes.fetch_add(e.bytes, std::memory_order_relaxed);
      stages_.bytes[i].fetch_add(e.bytes, std::memory_order_relaxed);
      break;
    default:
      break;
  }
}

void PathCounter::on_forward(const ForwardEvent& e) {
  if (e.point != ForwardPoint::AttentionPlanned) return;
  if (!e.mtp) {
    const CallTally t = tally(e.calls);
    auto& mha = e.sparse ? paths_.sparse_layer_tokens_mha : paths_.dense_layer_tokens_mha;
    auto& mqa = e.sparse ? paths_.sparse_layer_tokens_mqa : paths_.dense_layer_tokens_mqa;
    mha.fetch_add(t.tokens_mha, std::memory_order_relaxed);
    mqa.fetch_add(t.tokens_mqa, std::memory_order_relaxed);
    if (e.layer == 0) {
      paths_.tokens_mha.fetch_add(t.tokens_mha, std::memory_order_relaxed);
      paths_.tokens_mqa.fetch_add(t.tokens_mqa, std::memory_order_relaxed);
    }
  }
  if (e.sparse) {
    sparse_.layer_tokens.fetch_add(e.batch->n_tokens(), std::memory_order_relaxed);
    sparse_.selected_rows.fetch_add(selected_rows(e), std::memory_order_relaxed);
  }
}

void DispatchTracer::on_forward(const ForwardEvent& e) {
  if (e.point != ForwardPoint::AttentionPlanned) return;
  const CallTally t = tally(e.calls);
  trace_dispatch(static_cast<int>(e.layer), e.sparse, t.seqs_mqa, t.seqs_mha, static_cast<int>(e.batch->n_tokens()),
                 mla_path_policy_name(e.batch->policy), e.sparse ? index_top_k_ : 0, selected_rows(e), t.verify_mqa,
                 t.verify_mha);
}

}  // namespace mla
