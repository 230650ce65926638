// The MoE FFN of Deepseek2Model: routing, the routed experts grouped by expert (each rank its own
// range of experts), their sums in a fixed order across ranks, then the shared experts.
#include <algorithm>
#include <array>
#include <atomic>  // expert_matmuls' work counter
#include <cstring>
#include <optional>

#include "kernels/moe.h"
#include "kernels/ops.h"
#include "model/deepseek2.h"
#include "quant/quant.h"

namespace mla {
namespace {

// Element-wise work below this many values runs on the calling thread: a decode step's few
// (token, expert) pairs cost less than a hand-off to the pool. The results do not depend on it.
constexpr int64_t kInlineElems = 16 * 1024;

template <typename F>
void parallel_for_large(ThreadPool& pool, int64_t n, int64_t elems, F&& fn) {
  if (elems <= kInlineElems)
    fn(int64_t{0}, n, 0);
  else
    pool.parallel_for(n, fn);
}

}  // namespace

std::array<QuantizedActivations, 2> Deepseek2Model::expert_inputs(std::initializer_list<const WeightMatrix*> ws,
                                                                  int64_t c0, int64_t c1, int64_t n_pairs) {
  const int64_t E = c_.n_embd, K = c_.n_expert_used;
  const WeightMatrix* const* w = ws.begin();
  std::array<QuantizedActivations, 2> out;
  for (size_t i = 0; i < ws.size(); ++i) {
    if (i == 1 && vec_dot_type(w[1]->type) == vec_dot_type(w[0]->type)) {
      out[1] = out[0];  // gate and up nearly always share the activation type
      break;
    }
    // Each token's row quantized once, then copied to each of its pairs' rows.
    const QuantizedActivations tok =
        quantize_activations(w[i]->type, h_.data() + c0 * E, E, c1 - c0, E, &pool_, moe_act_[i]);
    const int64_t rb = tok.row_bytes;
    std::vector<uint8_t>& rows = moe_pair_act_[i];
    if (rows.size() < static_cast<size_t>(n_pairs * rb)) rows.resize(static_cast<size_t>(n_pairs * rb));
    // Only the pairs of this rank's experts (all of them in a single process).
    const int64_t j0 = expert_offsets_[experts_.begin], j1 = expert_offsets_[experts_.end];
    parallel_for_large(pool_, j1 - j0, (j1 - j0) * rb / 4, [&](int64_t b0, int64_t b1, int) {
      for (int64_t j = j0 + b0; j < j0 + b1; ++j)
        std::memcpy(rows.data() + j * rb, tok.data + (expert_rows_[j] / K - c0) * rb, rb);
    });
    out[i] = {rows.data(), rb};
  }
  return out;
}

void Deepseek2Model::expert_matmuls(std::initializer_list<const WeightMatrix*> ws, int64_t out_rows,
                                    const std::array<QuantizedActivations, 2>& act, std::initializer_list<float*> ys,
                                    int64_t act_row0) {
  const WeightMatrix* const* w = ws.begin();
  float* const* y = ys.begin();
  const int n_mat = static_cast<int>(ws.size());
  // Pieces of kRows output rows of one expert's matrix, handed out first come first served: the
  // experts' pair counts differ, so a static split would leave threads idle. Where every expert
  // has a token or two (decode) a piece is a short stream of weight rows: 128 rows make fewer
  // hand-offs and longer prefetched runs (V2-Lite decode: the experts' stage from ~36 to ~39 GB/s).
  int64_t max_pairs = 0;
  for (auto e = experts_.begin; e < experts_.end; ++e)
    max_pairs = std::max<int64_t>(max_pairs, expert_offsets_[e + 1] - expert_offsets_[e]);
  const int32_t kRows = max_pairs <= 2 ? 128 : 32;
  expert_pieces_.clear();
  for (auto e = static_cast<int32_t>(experts_.begin); e < static_cast<int32_t>(experts_.end); ++e)
    if (expert_offsets_[e + 1] > expert_offsets_[e])
      for (int32_t i = 0; i < n_mat; ++i)
        for (int32_t r0 = 0; r0 < out_rows; r0 += kRows) expert_pieces_.push_back({i, e, r0});
  const ExpertCache* cache = w_.expert_cache.get();  // set: the experts' rows are in expert_lease_'s slots
  std::atomic<size_t> next{0};
  pool_.run([&](int) {
    for (size_t k; (k = next.fetch_add(1, std::memory_order_relaxed)) < expert_pieces_.size();) {
      const ExpertPiece& pc = expert_pieces_[k];
      const int32_t b0 = expert_offsets_[pc.expert], m = expert_offsets_[pc.expert + 1] - b0;
      const QuantizedActivations a{act[pc.matrix].data + (b0 - act_row0) * act[pc.matrix].row_bytes,
                                   act[pc.matrix].row_bytes};
      const WeightMatrix we = cache ? cache->matrix(expert_lease_, *w[pc.matrix], pc.expert)
                                    : w[pc.matrix]->rows(pc.expert * out_rows, out_rows);
      matmul_rows(we, a, m, y[pc.matrix] + b0 * out_rows, out_rows, pc.row0,
                  std::min<int64_t>(out_rows, pc.row0 + kRows));
    }
  });
  const int64_t j0 = expert_offsets_[experts_.begin] * out_rows, j1 = expert_offsets_[experts_.end] * out_rows;
  for (int i = 0; i < n_mat; ++i)
    if (w[i]->scale != 1.0f)
      for (int64_t j = j0; j < j1; ++j) y[i][j] *= w[i]->scale;
}

void Deepseek2Model::route_tokens(const LayerWeights& L, int64_t n) {
  const int64_t E = c_.n_embd, X = c_.n_expert, K = c_.n_expert_used;
  // Routing: {n_embd, n} -> {n_expert, n} logits -> k experts and weights per token.
  mm(L.ffn_gate_inp, h_.data(), E, n, router_.data(), X);
  MoeRouting r;
  r.n_expert = static_cast<int>(X);
  r.n_expert_used = static_cast<int>(K);
  r.n_group = static_cast<int>(c_.n_expert_groups);
  r.n_group_used = static_cast<int>(c_.n_expert_groups_used);
  r.gating = c_.gating;
  r.norm_weights = c_.expert_weights_norm;
  r.weights_scale = static_cast<float>(c_.expert_weights_scale);
  r.bias = L.exp_probs_b.empty() ? nullptr : L.exp_probs_b.data();
  for (int64_t t = 0; t < n; ++t)
    moe_route(r, router_.data() + t * X, sel_experts_.data() + t * K, sel_weights_.data() + t * K,
              route_scratch_.data());
}

void Deepseek2Model::read_ahead_experts(int64_t il, const BatchMeta& b, int64_t n_rows, bool keep_rows) {
  ExpertCache* cache = w_.expert_cache.get();
  const int64_t next = il + 1;  // the MTP block (il = n_layer) predicts nothing
  if (!cache || !cache->reads_ahead() || other_run_ || next >= c_.n_layer || !w_.layers[next].is_moe) return;
  const LayerWeights& L = w_.layers[next];
  const int64_t E = c_.n_embd, X = c_.n_expert, K = c_.n_expert_used;
  const StageScope stage(*this, Stage::Router);
  // The last layer's FFN sees only the logits rows (block), unless every row is kept.
  const bool logits_only = next == c_.n_layer - 1 && !keep_rows;
  const int64_t n = logits_only ? static_cast<int64_t>(b.logits_rows.size()) : n_rows;
  if (n == 0) return;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t row = logits_only ? b.logits_rows[t] : t;
    rmsnorm(x_.data() + row * E, L.ffn_norm.data(), h_.data() + t * E, E, c_.rms_eps);
  }
  route_tokens(L, n);
  std::fill(expert_votes_.begin(), expert_votes_.end(), 0);
  for (int64_t p = 0; p < n * K; ++p) ++expert_votes_[sel_experts_[p]];
  expert_list_.clear();
  for (int32_t e = 0; e < static_cast<int32_t>(X); ++e)
    if (expert_votes_[e] > 0) expert_list_.push_back(e);
  // Most selected first: where the cache has fewer free slots than predictions, those are read.
  std::stable_sort(expert_list_.begin(), expert_list_.end(),
                   [&](int32_t a, int32_t c) { return expert_votes_[a] > expert_votes_[c]; });
  cache->read_ahead(L, expert_list_.data(), static_cast<int64_t>(expert_list_.size()));
}

ShardRange Deepseek2Model::group_pairs(const LayerWeights& L, int64_t p0, int64_t n_pairs) {
  const int64_t E = c_.n_embd, F = c_.n_ff_exp, X = c_.n_expert;
  // Group the chunk's pairs by expert, tokens ascending within an expert.
  std::fill(expert_offsets_.begin(), expert_offsets_.end(), 0);
  for (int64_t i = 0; i < n_pairs; ++i) expert_offsets_[sel_experts_[p0 + i] + 1]++;
  int64_t n_run = 0;
  for (int64_t e = 0; e < X; ++e) {
    n_run += expert_offsets_[e + 1] > 0 && experts_.contains(e);
    expert_offsets_[e + 1] += expert_offsets_[e];
  }
  const int64_t expert_bytes = L.gate_up_merged ? 2 * F * L.ffn_gate_up_exps.row_bytes
                                                : F * (L.ffn_gate_exps.row_bytes + L.ffn_up_exps.row_bytes);
  notify({.point = ForwardPoint::ExpertsRun,
          .bytes = n_run * (expert_bytes + E * L.ffn_down_exps.row_bytes),
          .n_experts = n_run});
  std::copy(expert_offsets_.begin(), expert_offsets_.end() - 1, expert_cursor_.begin());
  for (int64_t i = 0; i < n_pairs; ++i) {
    const int32_t at = expert_cursor_[sel_experts_[p0 + i]]++;
    expert_rows_[at] = static_cast<int32_t>(p0 + i);
    pair_pos_[i] = at;
  }
  // This rank's experts own the pairs [pa, pb) of the grouped order.
  return {expert_offsets_[experts_.begin], expert_offsets_[experts_.end]};
}

void Deepseek2Model::expert_ffns(const LayerWeights& L, int64_t c0, int64_t c1, int64_t n_pairs, ShardRange own) {
  const int64_t E = c_.n_embd, F = c_.n_ff_exp;
  const int64_t pa = own.begin, pb = own.end;
  // Streamed experts: this chunk's are loaded (where missing) and pinned before the parallel
  // work, and unpinned when it is done, whatever happens in between.
  struct Unpin {
    ExpertCache* cache;
    ExpertLease& lease;
    ~Unpin() {
      if (cache) cache->release(lease);
    }
  } unpin{w_.expert_cache.get(), expert_lease_};
  if (unpin.cache) {
    expert_list_.clear();
    for (auto e = static_cast<int32_t>(experts_.begin); e < static_cast<int32_t>(experts_.end); ++e)
      if (expert_offsets_[e + 1] > expert_offsets_[e]) expert_list_.push_back(e);
    unpin.cache->acquire(L, expert_list_.data(), static_cast<int64_t>(expert_list_.size()), pool_, expert_lease_);
  }
  if (L.gate_up_merged) {
    // {n_embd, m} -> {2 * n_ff_exp, m} per expert: gate rows then up rows, into up_.
    expert_matmuls({&L.ffn_gate_up_exps}, 2 * F, expert_inputs({&L.ffn_gate_up_exps}, c0, c1, n_pairs), {up_.data()});
    parallel_for_large(pool_, pb - pa, (pb - pa) * F, [&](int64_t b0, int64_t b1, int) {
      for (int64_t i = pa + b0; i < pa + b1; ++i)
        swiglu(up_.data() + i * 2 * F, up_.data() + i * 2 * F + F, gate_.data() + i * F, F);
    });
  } else {
    expert_matmuls({&L.ffn_gate_exps, &L.ffn_up_exps}, F,
                   expert_inputs({&L.ffn_gate_exps, &L.ffn_up_exps}, c0, c1, n_pairs), {gate_.data(), up_.data()});
    parallel_for_large(pool_, pb - pa, (pb - pa) * F, [&](int64_t b0, int64_t b1, int) {
      swiglu(gate_.data() + (pa + b0) * F, up_.data() + (pa + b0) * F, gate_.data() + (pa + b0) * F, (b1 - b0) * F);
    });
  }
  // The down projection's inputs are already one row per pair, in grouped order.
  const QuantizedActivations down_in =
      quantize_activations(L.ffn_down_exps.type, gate_.data() + pa * F, F, pb - pa, F, &pool_, moe_act_[0]);
  expert_matmuls({&L.ffn_down_exps}, E, {down_in, down_in}, {ex_out_.data()}, pa);
}

void Deepseek2Model::sum_expert_outputs(int64_t c0, int64_t c1, int64_t p0, ShardRange own) {
  const int64_t E = c_.n_embd, K = c_.n_expert_used;
  const int rank = rank_of(opt_.comm), n_ranks = n_ranks_of(opt_.comm);
  const int64_t pa = own.begin, pb = own.end;
  float* acc = proj_.data();
  // transformers' summation order: routed experts in expert order starting from zero (the
  // shared experts follow in moe_ffn), which is the order moe_route returns a token's experts in.
  // With several ranks the experts are contiguous ranges in rank order, so the same order is
  // a chain: rank r continues the sums rank r - 1 hands it (bit for bit the single-process
  // sums), and the last rank's are broadcast in moe_ffn. The ranks computed their experts in
  // parallel; only this addition waits on the previous rank.
  const size_t chunk_bytes = sizeof(float) * (c1 - c0) * E;
  if (rank > 0) opt_.comm->recv(acc + c0 * E, chunk_bytes, rank - 1);
  pool_.parallel_for(c1 - c0, [&](int64_t b0, int64_t b1, int) {
    for (int64_t t = c0 + b0; t < c0 + b1; ++t) {
      float* dst = acc + t * E;
      if (rank == 0) std::fill(dst, dst + E, 0.0f);
      for (int64_t pair = t * K; pair < (t + 1) * K; ++pair) {
        const int64_t at = pair_pos_[pair - p0];
        if (at < pa || at >= pb) continue;  // another rank's expert
        const float wgt = sel_weights_[pair];
        const float* src = ex_out_.data() + at * E;
        for (int64_t j = 0; j < E; ++j) dst[j] += src[j] * wgt;
      }
    }
  });
  if (rank < n_ranks - 1) opt_.comm->send(acc + c0 * E, chunk_bytes, rank + 1);
}

void Deepseek2Model::moe_ffn(const LayerWeights& L, int64_t n) {
  const int64_t E = c_.n_embd, F = c_.n_ff_exp, K = c_.n_expert_used;
  const int rank = rank_of(opt_.comm), n_ranks = n_ranks_of(opt_.comm);
  std::optional<StageScope> stage(std::in_place, *this, Stage::Router);
  route_tokens(L, n);

  // Tokens are taken a chunk at a time so that their (token, expert) pairs fit the buffers. In a
  // chunk every routed expert's work is one parallel region per stage (inputs quantized once,
  // then gate/up rows, SwiGLU, down rows), handed out to threads in small pieces; each output is
  // one dot product, so the results do not depend on chunking, scheduling or threads.
  stage.reset();
  stage.emplace(*this, Stage::Experts);
  float* acc = proj_.data();
  const int64_t chunk = std::max<int64_t>(1, pair_capacity_ / K);
  for (int64_t c0 = 0; c0 < n; c0 += chunk) {
    const int64_t c1 = std::min(n, c0 + chunk);
    const int64_t p0 = c0 * K, P = (c1 - c0) * K;  // pairs p0 .. p0 + P - 1 (token * K + k)
    const ShardRange own = group_pairs(L, p0, P);
    expert_ffns(L, c0, c1, P, own);
    sum_expert_outputs(c0, c1, p0, own);
  }
  // The shared experts come last in the sum: the last rank, which holds the routed sums, adds them.
  stage.reset();
  stage.emplace(*this, Stage::DenseFfn);
  if (c_.n_expert_shared > 0) {
    swiglu_ffn(L.ffn_gate_shexp, L.ffn_up_shexp, L.ffn_down_shexp, F * c_.n_expert_shared, n, ex_out_.data());
    if (rank == n_ranks - 1)
      for (int64_t t = 0; t < n; ++t) add_inplace(acc + t * E, ex_out_.data() + t * E, E);
  }
  if (n_ranks > 1) opt_.comm->broadcast(acc, sizeof(float) * n * E, n_ranks - 1);
}

}  // namespace mla
