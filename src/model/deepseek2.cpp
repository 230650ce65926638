#include "model/deepseek2.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>

#include <sys/mman.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "kernels/ops.h"
#include "kernels/path_cost.h"
#include "kernels/rope.h"
#include "model/model_comm.h"
#include "quant/quant.h"
#include "util/error.h"
#include "util/log.h"

namespace mla {
namespace {

MlaPath other_path(MlaPath p) { return p == MlaPath::Mha ? MlaPath::Mqa : MlaPath::Mha; }

// With an expert cache the file is mapped without prefaulting; the tensors that stay resident
// are prefaulted here instead (best effort, as GgufFile::open does), the routed experts never.
void prefault_resident_tensors(const GgufFile& f) {
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14
#endif
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  for (const GgufTensorInfo& t : f.tensors()) {
    if (t.converted || is_routed_expert_tensor(t.name) || t.n_bytes == 0) continue;
    const auto* data = static_cast<const uint8_t*>(t.data);
    const size_t lead = reinterpret_cast<uintptr_t>(data) % page;  // back to the page start
    void* p = const_cast<uint8_t*>(data - lead);
    const size_t n = t.n_bytes + lead;
    if (madvise(p, n, MADV_POPULATE_READ) != 0) madvise(p, n, MADV_WILLNEED);
  }
}

}  // namespace

Deepseek2Bundle::~Deepseek2Bundle() = default;

WeightLoadOptions weight_options_for(MlaPathPolicy policy, bool verify_paths) {
  WeightLoadOptions o;
  if (!verify_paths && policy == MlaPathPolicy::Mha) o.need_mqa = false;
  if (!verify_paths && policy == MlaPathPolicy::Mqa) o.need_mha = false;
  return o;
}

std::unique_ptr<Deepseek2Bundle> load_deepseek2(const std::string& path, const WeightLoadOptions& opt) {
  auto b = std::make_unique<Deepseek2Bundle>();
  const bool stream_experts = opt.expert_cache.budget_bytes > 0;
  b->file = GgufFile::open(path, opt.prefault && !stream_experts);
  b->config = load_deepseek_config(*b->file);
  if (stream_experts && opt.prefault) prefault_resident_tensors(*b->file);
  b->weights = bind_deepseek_weights(*b->file, b->config, opt);
  return b;
}

Deepseek2Model::Deepseek2Model(const DeepseekConfig& c, const DeepseekWeights& w, const ModelOptions& opt)
    : c_(c), w_(w), opt_(opt), pool_(opt.n_threads), path_counter_(c.n_layer), tracer_(c.indexer_top_k) {
  if (opt_.max_batch_tokens < 1) fail("model: max_batch_tokens is {}, expected >= 1", opt_.max_batch_tokens);
  const size_t T = static_cast<size_t>(opt_.max_batch_tokens);
  const int64_t shared_ff = c.n_ff_exp * c.n_expert_shared;
  // The MoE layer works on (token, expert) pairs, a chunk of tokens at a time, in these buffers.
  pair_capacity_ = moe_pair_capacity(static_cast<int64_t>(T), c.n_expert_used);
  const size_t R = static_cast<size_t>(pair_capacity_);
  // gate_ / up_ hold what the MoE needs (R pairs of up to 2 * n_ff_exp values, every token's
  // shared experts); a wider dense FFN runs its tokens in chunks that fit (swiglu_ffn), at least
  // kDenseFfnRows of them: at V2-Lite widths and 2,048 tokens that is 2 x 22 MiB instead of 2 x 85.5.
  constexpr int64_t kDenseFfnRows = 256;
  const size_t ffn_floats = std::max({R * static_cast<size_t>(std::max({shared_ff, 2 * c.n_ff_exp, int64_t{1}})),
                                      std::min<size_t>(T, kDenseFfnRows) * static_cast<size_t>(c.n_ff)});
  x_.resize(T * c.n_embd);
  h_.resize(T * c.n_embd);
  q_a_.resize(T * std::max<int64_t>(c.q_lora_rank, 1));
  q_.resize(T * c.n_head * c.qk_head);
  kv_.resize(T * c.latent_dim);
  attn_.resize(T * c.n_head * c.v_head);
  prefill_path_ = cheaper_prefill_path(c.kv_lora_rank, c.qk_nope, c.qk_rope, c.v_head, opt_.exact_attention);
  proj_.resize(T * c.n_embd);
  gate_.resize(ffn_floats);
  up_.resize(ffn_floats);
  cos_.resize(T * c.qk_rope / 2);
  sin_.resize(T * c.qk_rope / 2);
  if (w.nextn.present) mtp_in_.resize(T * 2 * c.n_embd);
  if (opt_.dsa && c.has_indexer) {
    iq_.resize(T * c.n_indexer_head * c.indexer_head_dim);
    ik_.resize(T * c.indexer_head_dim);
    iw_.resize(T * c.n_indexer_head);
    sel_.resize(T * c.indexer_top_k);
    sel_count_.resize(T);
  }
  experts_ = {0, c.n_expert};
  heads_ = {0, c.n_head};
  if (n_ranks_of(opt_.comm) > 1) {
    if (opt_.comm->size() > c.n_head)
      fail("{} ranks but the model has {} attention heads: tensor parallelism needs at most one rank per head",
           opt_.comm->size(), c.n_head);
    heads_ = shard_range(c.n_head, opt_.comm->rank(), opt_.comm->size());
    if (opt_.observer) fail("model: the attention observer (mla doctor) works in a single process only");
  }
  if (n_ranks_of(opt_.comm) > 1 && c.n_layer_dense_lead < c.n_layer) {
    if (opt_.comm->size() > c.n_expert)
      fail("{} ranks but the model has {} routed experts: expert parallelism needs at most one rank per expert",
           opt_.comm->size(), c.n_expert);
    experts_ = shard_range(c.n_expert, opt_.comm->rank(), opt_.comm->size());
  }
  observers_ = {&profiler_, &path_counter_, &tracer_};
  if (opt_.observer) observers_.push_back(opt_.observer);
  if (opt_.verify_paths) {  // after every buffer is sized: the verifier sizes its own like them
    verifier_ = std::make_unique<PathVerifier>(*this);
    observers_.push_back(verifier_.get());
  }
  if (c.n_layer_dense_lead < c.n_layer) {
    router_.resize(T * c.n_expert);
    sel_experts_.resize(T * c.n_expert_used);
    sel_weights_.resize(T * c.n_expert_used);
    route_scratch_.resize(2 * c.n_expert + c.n_expert_groups);
    expert_offsets_.resize(c.n_expert + 1);
    expert_cursor_.resize(c.n_expert);
    expert_list_.reserve(c.n_expert);
    expert_votes_.resize(c.n_expert);
    expert_rows_.resize(T * c.n_expert_used);
    pair_pos_.resize(T * c.n_expert_used);
    ex_out_.resize(R * c.n_embd);
  }
}

Deepseek2Model::~Deepseek2Model() = default;

const PathVerifyLog& Deepseek2Model::verify_log() const {
  static const PathVerifyLog kNone;
  return verifier_ ? verifier_->log() : kNone;
}

void Deepseek2Model::mm(const WeightMatrix& w, const float* x, int64_t x_stride, int64_t n, float* y,
                        int64_t y_stride) {
  count_weight_bytes(w);
  matmul(w, x, x_stride, n, y, y_stride, pool_, mm_scratch_);
  if (w.scale != 1.0f)
    for (int64_t t = 0; t < n; ++t)
      for (int64_t r = 0; r < w.n_rows; ++r) y[t * y_stride + r] *= w.scale;
}

void Deepseek2Model::mm2(const WeightMatrix& w1, float* y1, int64_t y1_stride, const WeightMatrix& w2, float* y2,
                         int64_t y2_stride, const float* x, int64_t x_stride, int64_t n) {
  count_weight_bytes(w1);
  count_weight_bytes(w2);
  matmul_multi({{&w1, y1, y1_stride}, {&w2, y2, y2_stride}}, x, x_stride, n, w1.n_cols, pool_, mm_scratch_);
  for (auto [w, y, stride] : {std::tuple{&w1, y1, y1_stride}, std::tuple{&w2, y2, y2_stride}})
    if (w->scale != 1.0f)
      for (int64_t t = 0; t < n; ++t)
        for (int64_t r = 0; r < w->n_rows; ++r) y[t * stride + r] *= w->scale;
}

void Deepseek2Model::mm_split(const WeightMatrix& w, const float* x, int64_t x_stride, int64_t n, float* y,
                              int64_t y_stride) {
  if (n_ranks_of(opt_.comm) == 1) return mm(w, x, x_stride, n, y, y_stride);
  const ShardRange rows = shard_range(w.n_rows, opt_.comm->rank(), opt_.comm->size());
  mm(w.rows(rows.begin, rows.size()), x, x_stride, n, y + rows.begin, y_stride);
  all_gather_columns(*opt_.comm, y, y_stride, n, w.n_rows, 1, gather_scratch_);
}

void Deepseek2Model::swiglu_ffn(const WeightMatrix& gate, const WeightMatrix& up, const WeightMatrix& down,
                                int64_t n_ff, int64_t n, float* out) {
  const int64_t E = c_.n_embd;
  // {n_embd, n} -> {n_ff, n}: this rank's columns [f.begin, f.end) of gate_ and up_ (all in one process),
  // as many tokens at a time as gate_ holds (every row is computed on its own: chunking changes no bit).
  const ShardRange f = shard_range(n_ff, rank_of(opt_.comm), n_ranks_of(opt_.comm));
  const int64_t rows = std::max<int64_t>(1, static_cast<int64_t>(gate_.size()) / n_ff);
  for (int64_t t0 = 0; t0 < n; t0 += rows) {
    const int64_t m = std::min(rows, n - t0);
    mm2(gate.rows(f.begin, f.size()), gate_.data() + f.begin, n_ff, up.rows(f.begin, f.size()), up_.data() + f.begin,
        n_ff, h_.data() + t0 * E, E, m);
    for (int64_t t = 0; t < m; ++t)
      swiglu(gate_.data() + t * n_ff + f.begin, up_.data() + t * n_ff + f.begin, gate_.data() + t * n_ff + f.begin,
             f.size());
    if (n_ranks_of(opt_.comm) > 1) all_gather_columns(*opt_.comm, gate_.data(), n_ff, m, n_ff, 1, gather_scratch_);
    mm_split(down, gate_.data(), n_ff, m, out + t0 * E, E);
  }
}

void Deepseek2Model::validate(const BatchMeta& b, const LatentCache& cache) const {
  const int64_t T = b.n_tokens();
  if (T < 1) fail("batch: no tokens");
  if (T > opt_.max_batch_tokens) fail("batch: {} tokens exceed max_batch_tokens {}", T, opt_.max_batch_tokens);
  if (static_cast<int64_t>(b.positions.size()) != T || static_cast<int64_t>(b.slot_mapping.size()) != T)
    fail("batch: {} token ids but {} positions and {} slots", T, b.positions.size(), b.slot_mapping.size());
  // The MTP layer's rows, when it is loaded, are one more cache layer; a trunk-only cache also
  // serves the trunk.
  const int64_t n_cache_layers = c_.n_layer + (has_mtp() ? 1 : 0);
  if ((cache.shape().n_layer != c_.n_layer && cache.shape().n_layer != n_cache_layers) ||
      cache.shape().row_elems() != c_.latent_dim || cache.shape().kv_lora_rank != c_.kv_lora_rank)
    fail("batch: latent cache is {} layers x {} values, model needs {} x {}", cache.shape().n_layer,
         cache.shape().row_elems(), n_cache_layers, c_.latent_dim);
  if (sparse())
    for (int64_t il = 0; il < c_.n_layer; ++il)
      if (cache.shape().index_key_dim(static_cast<int>(il)) != c_.indexer_key_dim(il))
        fail("batch: latent cache layer {} holds indexer keys of {} values, model needs {}", il,
             cache.shape().index_key_dim(static_cast<int>(il)), c_.indexer_key_dim(il));
  for (int64_t t = 0; t < T; ++t) {
    if (b.token_ids[t] < 0 || b.token_ids[t] >= c_.n_vocab)
      fail("batch: token id {} at row {} outside the vocabulary [0, {})", b.token_ids[t], t, c_.n_vocab);
    if (b.slot_mapping[t] < 0 || b.slot_mapping[t] >= cache.n_slots())
      fail("batch: slot {} at row {} outside the cache's {} slots", b.slot_mapping[t], t, cache.n_slots());
    if (b.positions[t] < 0) fail("batch: negative position {} at row {}", b.positions[t], t);
  }
  int64_t covered = 0;
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    const SeqMeta& s = b.seqs[i];
    if (s.query_start != covered || s.query_len < 1 || s.query_len > s.context_len)
      fail("batch: sequence {} has query [{}, +{}) with context {} (tokens must be contiguous, 1 <= query <= context)",
           i, s.query_start, s.query_len, s.context_len);
    covered += s.query_len;
    if (covered > T) fail("batch: sequences cover more than the {} tokens", T);
    if (s.slots_start < 0 || static_cast<size_t>(s.slots_start) + s.context_len > b.context_slots.size())
      fail("batch: sequence {} slot list [{}, +{}) exceeds the {} context slots", i, s.slots_start, s.context_len,
           b.context_slots.size());
    for (int32_t j = 0; j < s.context_len; ++j) {
      int32_t slot = b.context_slots[s.slots_start + j];
      if (slot < 0 || slot >= cache.n_slots()) fail("batch: sequence {} context slot {} out of range", i, slot);
    }
    for (int32_t k = 0; k < s.query_len; ++k)
      if (b.context_slots[s.slots_start + s.context_len - s.query_len + k] != b.slot_mapping[s.query_start + k])
        fail("batch: sequence {}: token {} is written to slot {} but its context position lists slot {}", i,
             s.query_start + k, b.slot_mapping[s.query_start + k],
             b.context_slots[s.slots_start + s.context_len - s.query_len + k]);
  }
  if (covered != T) fail("batch: sequences cover {} of {} tokens", covered, T);
  for (size_t i = 0; i < b.logits_rows.size(); ++i)
    if (b.logits_rows[i] < 0 || b.logits_rows[i] >= T || (i > 0 && b.logits_rows[i] <= b.logits_rows[i - 1]))
      fail("batch: logits rows must be ascending batch rows, got {} at index {}", b.logits_rows[i], i);
}

void Deepseek2Model::forward(const BatchMeta& b, LatentCache& cache, float* logits, float* hidden) {
  validate(b, cache);
  const int64_t T = b.n_tokens(), E = c_.n_embd;
  embed(w_.token_embd, b, x_.data(), E);
  notify({.point = ForwardPoint::StepBegin, .batch = &b});
  int64_t n_rows = T;  // rows of x_ still carried (the last layer keeps the logits rows)
  for (int64_t il = 0; il < c_.n_layer; ++il) {
    n_rows = block(w_.layers[il], il, sparse(), b, cache, n_rows, hidden != nullptr);
    notify({.point = ForwardPoint::LayerEnd, .layer = il, .sparse = sparse(), .batch = &b, .cache = &cache});
  }
  // No logits: a worker rank (rank 0 computes them).
  if (logits || hidden) head(w_.output_norm, w_.output, n_rows, hidden, &b.logits_rows, logits);
  notify({.point = ForwardPoint::StepEnd, .batch = &b, .logits = logits});
}

void Deepseek2Model::forward_mtp(const BatchMeta& b, const float* h_in, LatentCache& cache, float* logits,
                                 float* h_out) {
  if (!has_mtp()) fail("model: the MTP layer was not loaded");
  validate(b, cache);
  const NextnWeights& n = w_.nextn;
  const int64_t il = n.layer_index;
  if (cache.shape().n_layer <= il) fail("batch: the latent cache has no MTP layer (layer {})", il);
  const int64_t T = b.n_tokens(), E = c_.n_embd;
  // [enorm(embed(t)) ; hnorm(h)] -> eh_proj -> the block's residual stream.
  embed(n.embed, b, mtp_in_.data(), 2 * E);
  pool_.parallel_for(T, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      float* in = mtp_in_.data() + t * 2 * E;
      rmsnorm(in, n.enorm.data(), in, E, c_.rms_eps);
      rmsnorm(h_in + t * E, n.hnorm.data(), in + E, E, c_.rms_eps);
    }
  });
  mm(n.eh_proj, mtp_in_.data(), 2 * E, T, x_.data(), E);
  block(n.layer, il, /*sparse=*/false, b, cache, T, /*keep_rows=*/true);
  head(n.head_norm, n.head, T, h_out, &b.logits_rows, logits);
}

void Deepseek2Model::embed(const WeightMatrix& table, const BatchMeta& b, float* dst, int64_t dst_stride) {
  const StageScope stage(*this, Stage::Embed);
  const int64_t E = c_.n_embd, half = c_.qk_rope / 2;
  pool_.parallel_for(b.n_tokens(), [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      float* row = dst + t * dst_stride;
      dequantize_row(table.type, table.row(b.token_ids[t]), row, E);
      if (table.scale != 1.0f)
        for (int64_t i = 0; i < E; ++i) row[i] *= table.scale;
      rope_cos_sin(c_.rope, b.positions[t], cos_.data() + t * half, sin_.data() + t * half);
    }
  });
}

int64_t Deepseek2Model::block(const LayerWeights& L, int64_t il, bool sparse, const BatchMeta& b, LatentCache& cache,
                              int64_t n_rows, bool keep_rows) {
  const int64_t T = b.n_tokens(), E = c_.n_embd;
  {
    const StageScope stage(*this, Stage::AttnIn);
    for (int64_t t = 0; t < T; ++t) rmsnorm(x_.data() + t * E, L.attn_norm.data(), h_.data() + t * E, E, c_.rms_eps);
  }
  attention(L, il, sparse, b, cache);
  {
    // {n_head * v_head, T} -> {n_embd, T}, added to the residual.
    const StageScope stage(*this, Stage::AttnOut);
    mm_split(L.attn_output, attn_.data(), c_.n_head * c_.v_head, T, proj_.data(), E);
    for (int64_t t = 0; t < T; ++t) add_inplace(x_.data() + t * E, proj_.data() + t * E, E);
  }
  read_ahead_experts(il, b, n_rows, keep_rows);
  if (il == c_.n_layer - 1 && !keep_rows) {
    // Only the rows whose logits are wanted go on; the caches are already written.
    n_rows = static_cast<int64_t>(b.logits_rows.size());
    for (int64_t i = 0; i < n_rows; ++i)
      if (b.logits_rows[i] != i) std::memcpy(x_.data() + i * E, x_.data() + b.logits_rows[i] * E, sizeof(float) * E);
    if (n_rows == 0) return 0;
  }
  ffn(L, n_rows);
  return n_rows;
}

void Deepseek2Model::head(const std::vector<float>& norm, const WeightMatrix& out, int64_t n_rows, float* normed,
                          const std::vector<int32_t>* logits_rows, float* logits) {
  const StageScope stage(*this, Stage::Head);
  const int64_t E = c_.n_embd;
  float* dst = normed ? normed : h_.data();
  for (int64_t t = 0; t < n_rows; ++t) rmsnorm(x_.data() + t * E, norm.data(), dst + t * E, E, c_.rms_eps);
  if (!logits) return;
  int64_t n_logits = n_rows;
  if (normed) {  // the logits rows gathered for the output matrix
    n_logits = static_cast<int64_t>(logits_rows->size());
    for (int64_t i = 0; i < n_logits; ++i)
      std::memcpy(h_.data() + i * E, normed + (*logits_rows)[i] * E, sizeof(float) * E);
  }
  if (n_logits > 0) mm(out, h_.data(), E, n_logits, logits, c_.n_vocab);
}

void Deepseek2Model::ffn(const LayerWeights& L, int64_t n_rows) {
  const int64_t E = c_.n_embd;
  {
    const StageScope stage(*this, L.is_moe ? Stage::Router : Stage::DenseFfn);
    for (int64_t t = 0; t < n_rows; ++t)
      rmsnorm(x_.data() + t * E, L.ffn_norm.data(), h_.data() + t * E, E, c_.rms_eps);
  }
  if (L.is_moe) {
    moe_ffn(L, n_rows);
  } else {
    const StageScope stage(*this, Stage::DenseFfn);
    dense_ffn(L, n_rows);
  }
  const StageScope stage(*this, L.is_moe ? Stage::Experts : Stage::DenseFfn);
  for (int64_t t = 0; t < n_rows; ++t) add_inplace(x_.data() + t * E, proj_.data() + t * E, E);
}

void Deepseek2Model::attention(const LayerWeights& L, int64_t il, bool sparse, const BatchMeta& b, LatentCache& cache) {
  const int64_t T = b.n_tokens();
  const bool mtp = il == c_.n_layer;
  {
    const StageScope stage(*this, Stage::AttnIn);
    attention_inputs(L, il, b, cache);
    if (sparse && c_.indexer_full[il]) run_indexer(il, b, cache);
    plan_attention_calls(b, sparse);
    notify({.point = ForwardPoint::AttentionPlanned,
            .layer = il,
            .mtp = mtp,
            .sparse = sparse,
            .batch = &b,
            .calls = attn_calls_,
            .sel_count = sparse ? sel_count_.data() : nullptr});
  }
  // Both paths read the context as the cache stores it, in its dtype (this step's rows included),
  // so a row's value does not depend on whether it was computed in this step or an earlier one.
  const StageScope stage(*this, Stage::Attention);
  const int64_t out_width = c_.n_head * c_.v_head;
  for (const auto& [s, path, last] : attn_calls_)
    run_mla_path(L, il, s, path, cache, b.context_slots.data() + s.slots_start, sparse,
                 attn_.data() + s.query_start * out_width);
  // Every rank gets every head's output (the input of attn_output's rows).
  if (n_ranks_of(opt_.comm) > 1)
    all_gather_columns(*opt_.comm, attn_.data(), out_width, T, c_.n_head, c_.v_head, gather_scratch_);
  notify({.point = ForwardPoint::AttentionDone,
          .layer = il,
          .mtp = mtp,
          .sparse = sparse,
          .batch = &b,
          .q = q_.data(),
          .latent = kv_.data(),
          .attn_out = attn_.data(),
          .cache = &cache});
}

void Deepseek2Model::attention_inputs(const LayerWeights& L, int64_t il, const BatchMeta& b, LatentCache& cache) {
  const int64_t T = b.n_tokens(), E = c_.n_embd, R = c_.kv_lora_rank, half = c_.qk_rope / 2;
  const int64_t q_width = c_.n_head * c_.qk_head;
  // This rank's heads [heads_.begin, heads_.end): their query columns of q_, their attention
  // outputs in attn_ (every head in a single process). The latent is every head's: all ranks
  // compute and cache all of it.
  const int64_t h0 = heads_.begin, n_own = heads_.size();
  const WeightMatrix q_rows = (c_.is_lite ? L.attn_q : L.attn_q_b).rows(h0 * c_.qk_head, n_own * c_.qk_head);

  // Query: {n_embd, T} -> {n_head * qk_head, T} directly (lite) or through the q LoRA.
  if (c_.is_lite) {
    mm(q_rows, h_.data(), E, T, q_.data() + h0 * c_.qk_head, q_width);
  } else {
    // The q LoRA's first half and the latent share their input: one region for both.
    mm2(L.attn_q_a, q_a_.data(), c_.q_lora_rank, L.attn_kv_a_mqa, kv_.data(), c_.latent_dim, h_.data(), E, T);
    for (int64_t t = 0; t < T; ++t)
      rmsnorm(q_a_.data() + t * c_.q_lora_rank, L.attn_q_a_norm.data(), q_a_.data() + t * c_.q_lora_rank,
              c_.q_lora_rank, c_.rms_eps);
    mm(q_rows, q_a_.data(), c_.q_lora_rank, T, q_.data() + h0 * c_.qk_head, q_width);
  }
  // Latent: {n_embd, T} -> {kv_lora_rank + qk_rope, T} (with q_a above when there is a q LoRA);
  // norm c_kv, rope k_pe, store in the cache.
  if (c_.is_lite) mm(L.attn_kv_a_mqa, h_.data(), E, T, kv_.data(), c_.latent_dim);
  pool_.parallel_for(T, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* cs = cos_.data() + t * half;
      const float* sn = sin_.data() + t * half;
      float* kv = kv_.data() + t * c_.latent_dim;
      rmsnorm(kv, L.attn_kv_a_norm.data(), kv, R, c_.rms_eps);
      rope_apply(kv + R, 1, 0, static_cast<int>(c_.qk_rope), cs, sn);
      cache.write_row(static_cast<int>(il), b.slot_mapping[t], kv);
      // q_pe of every head: {qk_rope} at offset qk_nope of each {qk_head}.
      rope_apply(q_.data() + t * q_width + h0 * c_.qk_head + c_.qk_nope, n_own, c_.qk_head,
                 static_cast<int>(c_.qk_rope), cs, sn);
    }
  });
}

void Deepseek2Model::plan_attention_calls(const BatchMeta& b, bool sparse) {
  // The dispatch decision point (mla_path): one kernel call per sequence, except speculative
  // verify rows in a sparse layer under the auto policy, which go one query at a time so that each
  // takes the path (and the kernel call) a 1-token decode at its position would (elsewhere verify
  // rows take the decode's path whole), and, under phase paths, a chunk that spans the end of the
  // prompt, which goes as two calls.
  attn_calls_.clear();
  for (const auto& s : b.seqs) {
    const int32_t first = s.context_len - s.query_len;
    if (phase_paths(b, s) && !s.verify && first < s.n_prompt && s.n_prompt < s.context_len) {
      // A chunk that holds the prompt's end and generated tokens (a preempted sequence computed
      // again): two calls, each of its tokens down its phase's path.
      SeqMeta prompt = s, generated = s;
      prompt.query_len = s.n_prompt - first;
      prompt.context_len = s.n_prompt;
      generated.query_start = s.query_start + prompt.query_len;
      generated.query_len = s.query_len - prompt.query_len;
      attn_calls_.push_back({prompt, mla_path(b, prompt, sparse), false});
      attn_calls_.push_back({generated, mla_path(b, generated, sparse), true});
    } else if (sparse && b.policy == MlaPathPolicy::Auto && s.verify) {
      for (int32_t i = 0; i < s.query_len; ++i) {
        SeqMeta q = s;
        q.query_start = s.query_start + i;
        q.query_len = 1;
        q.context_len = s.context_len - (s.query_len - 1 - i);
        attn_calls_.push_back({q, mla_path(b, q, sparse), i == s.query_len - 1});
      }
    } else {
      attn_calls_.push_back({s, mla_path(b, s, sparse), true});
    }
  }
}

MlaPath Deepseek2Model::mla_path(const BatchMeta& b, const SeqMeta& s, bool sparse) const {
  MlaPath path = MlaPath::Mha;
  switch (b.policy) {
    case MlaPathPolicy::Mha:
      path = MlaPath::Mha;
      break;
    case MlaPathPolicy::Mqa:
      path = MlaPath::Mqa;
      break;
    case MlaPathPolicy::Auto:
      if (phase_paths(b, s))
        path = s.verify || s.context_len - s.query_len >= s.n_prompt ? MlaPath::Mqa : prefill_path_;
      else if (sparse)
        path = cheaper_sparse_path(c_.kv_lora_rank, c_.qk_nope, c_.qk_rope, c_.v_head, s.query_len, s.context_len,
                                   selected_rows(s));
      else
        path = (s.verify ? 1 : s.query_len) <= b.decode_threshold ? MlaPath::Mqa : prefill_path_;
      break;
  }
  return other_run_ ? other_path(path) : path;
}

int64_t Deepseek2Model::selected_rows(const SeqMeta& s) const {
  int64_t n = 0;
  for (int32_t i = 0; i < s.query_len; ++i) n += sel_count_[s.query_start + i];
  return n;
}

bool Deepseek2Model::phase_paths(const BatchMeta& b, const SeqMeta& s) const {
  return !opt_.exact_attention && b.policy == MlaPathPolicy::Auto && s.n_prompt >= 0;
}

void Deepseek2Model::run_indexer(int64_t il, const BatchMeta& b, LatentCache& cache) {
  const LayerWeights& L = w_.layers[il];
  const int64_t T = b.n_tokens(), E = c_.n_embd, H = c_.n_indexer_head, D = c_.indexer_head_dim;
  const int64_t half = c_.qk_rope / 2, K = c_.indexer_top_k;
  // q from the normed q LoRA latent, the key and the head weights from the attention input:
  // {q_lora_rank, T} -> {H * D, T}; {n_embd, T} -> {D, T} and {H, T}.
  mm(L.idx_q_b, q_a_.data(), c_.q_lora_rank, T, iq_.data(), H * D);
  mm(L.idx_k, h_.data(), E, T, ik_.data(), D);
  mm(L.idx_proj, h_.data(), E, T, iw_.data(), H);
  const float w_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D * H)));
  auto rope = c_.indexer_rope == RopeLayout::Neox ? rope_apply_neox : rope_apply;
  pool_.parallel_for(T, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* cs = cos_.data() + t * half;
      const float* sn = sin_.data() + t * half;
      float* k = ik_.data() + t * D;
      // Head layout [rope | nope]: the first qk_rope dims rotate.
      layernorm(k, L.idx_k_norm.data(), L.idx_k_norm_b.data(), k, D, static_cast<float>(c_.indexer_norm_eps));
      rope(k, 1, 0, static_cast<int>(c_.qk_rope), cs, sn);
      rope(iq_.data() + t * H * D, H, D, static_cast<int>(c_.qk_rope), cs, sn);
      for (int64_t h = 0; h < H; ++h) iw_[t * H + h] *= w_scale;
      cache.write_index_row(static_cast<int>(il), b.slot_mapping[t], k);
    }
  });
  // Each sequence's queries select from its own context, read in place from the cache.
  for (const auto& s : b.seqs) {
    IndexerParams p;
    p.n_head = H;
    p.head_dim = D;
    p.top_k = K;
    p.n_q = s.query_len;
    p.q = iq_.data() + s.query_start * H * D;
    p.q_stride = H * D;
    p.w = iw_.data() + s.query_start * H;
    p.w_stride = H;
    p.n_ctx = s.context_len;
    p.keys = cache.index_row_data(static_cast<int>(il), 0);
    p.key_type = cache.index_dtype();
    p.key_row_bytes = cache.index_row_bytes(static_cast<int>(il));
    p.slots = b.context_slots.data() + s.slots_start;
    p.sel = sel_.data() + s.query_start * K;
    p.sel_stride = K;
    p.sel_count = sel_count_.data() + s.query_start;
    indexer_select(p, pool_, idx_scratch_);
  }
}

void Deepseek2Model::run_mla_path(const LayerWeights& L, int64_t il, const SeqMeta& s, MlaPath path,
                                  const LatentCache& cache, const int32_t* ctx_slots, bool sparse, float* out) {
  MlaAttnParams p;
  // This rank's heads: their query columns, W_UK/W_UV slices and output columns.
  const int64_t h0 = heads_.begin;
  p.n_head = heads_.size();
  p.qk_nope = c_.qk_nope;
  p.qk_rope = c_.qk_rope;
  p.kv_lora = c_.kv_lora_rank;
  p.v_dim = c_.v_head;
  p.kq_scale = c_.kq_scale;
  p.n_q = s.query_len;
  p.q_stride = c_.n_head * c_.qk_head;
  p.q = q_.data() + s.query_start * p.q_stride + h0 * c_.qk_head;
  p.n_ctx = s.context_len;
  p.cache = cache.row_data(static_cast<int>(il), 0);
  p.cache_type = cache.dtype();
  p.cache_row_bytes = cache.row_bytes();
  p.slots = ctx_slots;
  const int64_t R = c_.kv_lora_rank, N = c_.qk_nope;
  p.w_uk = L.w_uk.from_head(h0, R, N);
  p.w_uk_t = L.w_uk_t.from_head(h0, N, R);
  p.w_uv = L.w_uv.from_head(h0, c_.v_head, R);
  p.out = out + h0 * c_.v_head;
  p.out_stride = c_.n_head * c_.v_head;
  // A sequence whose every query selected its whole visible context attends densely: the same
  // rows, and the dense kernel's tiling, so DSA below top_k is bit for bit dense MLA.
  bool whole_context = true;
  for (int32_t i = 0; sparse && whole_context && i < s.query_len; ++i)
    whole_context = sel_count_[s.query_start + i] == s.context_len - s.query_len + i + 1;
  if (sparse && !whole_context) {
    p.sel = sel_.data() + s.query_start * c_.indexer_top_k;
    p.sel_count = sel_count_.data() + s.query_start;
    p.sel_stride = c_.indexer_top_k;
  }
  {
    // What the kernel reads: the attended cache rows once, and this rank's W_UK (or W_UKᵀ) and W_UV.
    auto proj_bytes = [&](const MlaProj& w, int64_t rows, int64_t cols) {
      return p.n_head * rows * (w.row_bytes ? w.row_bytes : cols * static_cast<int64_t>(sizeof(float)));
    };
    int64_t rows_read = s.context_len;
    if (p.sel) {
      rows_read = 0;
      for (int32_t i = 0; i < s.query_len; ++i) rows_read = std::max<int64_t>(rows_read, p.sel_count[i]);
    }
    notify({.point = ForwardPoint::BytesRead,
            .bytes = rows_read * p.cache_row_bytes + proj_bytes(p.w_uv, c_.v_head, R) +
                     (path == MlaPath::Mha ? proj_bytes(p.w_uk_t, N, R) : proj_bytes(p.w_uk, R, N))});
  }
  if (path == MlaPath::Mha) {
    if (!p.w_uk_t) fail("model: the MHA path was requested but the model was loaded for MQA only");
    (opt_.exact_attention ? mla_attention_mha_exact : mla_attention_mha)(p, pool_, attn_scratch_);
  } else {
    if (!p.w_uk) fail("model: the MQA path was requested but the model was loaded for MHA only");
    (opt_.exact_attention ? mla_attention_mqa_exact : mla_attention_mqa)(p, pool_, attn_scratch_);
  }
}

void Deepseek2Model::dense_ffn(const LayerWeights& L, int64_t n) {
  swiglu_ffn(L.ffn_gate, L.ffn_up, L.ffn_down, c_.n_ff, n, proj_.data());
}

}  // namespace mla
