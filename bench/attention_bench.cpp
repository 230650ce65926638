// MLA attention and DSA indexer kernels at GLM-5's attention widths (64 heads, kv_lora 512,
// rope 64, nope 192, v 256; indexer 32 x 128), F16 cache, random data: the depth-dependent part of
// a decode step and of a prefill chunk, without the weights. Wall time (the kernels are threaded);
// counters: GMAC/s over the multiply-adds the kernel must do (scores and outputs over the rows
// attended, plus MQA's absorb/un-absorb or MHA's decompression), and ms per call.
//
//   attn/mqa_decode/<ctx>/<threads>      one query over ctx cached rows (absorbed path)
//   attn/mqa_chunk/<ctx>/<threads>       a 512-token prefill chunk ending at ctx (causal), MQA
//   attn/mha_chunk/<ctx>/<threads>       the same chunk down the decompressed (MHA) path
//   indexer/decode/<ctx>/<threads>       one query's indexer scores and top-2048 over ctx keys
//
//   build/bench/mla_bench --benchmark_filter='attn|indexer'
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <vector>

#include "../tests/support/random.h"
#include "kernels/attention.h"
#include "kernels/indexer.h"
#include "quant/quant.h"

namespace mla {
namespace {

constexpr int64_t kHead = 64, kNope = 192, kRope = 64, kLora = 512, kV = 256;
constexpr int64_t kIdxHead = 32, kIdxDim = 128, kTopK = 2048;
constexpr int64_t kChunk = 512;

// The latent rows of ctx tokens as an F16 cache (slots in order) and the weights.
struct AttnData {
  int64_t ctx, n_q;
  std::vector<uint16_t> cache;
  std::vector<float> q, w_uk, w_uk_t, w_uv, out;
  std::vector<int32_t> slots;
  AttnData(int64_t ctx_, int64_t n_q_) : ctx(ctx_), n_q(n_q_) {
    const int64_t row = kLora + kRope;
    const auto rows = randn(ctx * row, 1);
    cache.resize(ctx * row);
    for (int64_t j = 0; j < ctx; ++j) quantize_row(GgmlType::F16, rows.data() + j * row, cache.data() + j * row, row);
    q = randn(n_q * kHead * (kNope + kRope), 2, 0.3f);
    w_uk = randn(kHead * kLora * kNope, 3, 1.0f / std::sqrt(float(kLora)));
    w_uk_t = randn(kHead * kNope * kLora, 4, 1.0f / std::sqrt(float(kLora)));
    w_uv = randn(kHead * kV * kLora, 5, 1.0f / std::sqrt(float(kLora)));
    out.resize(n_q * kHead * kV);
    slots.resize(ctx);
    for (int64_t j = 0; j < ctx; ++j) slots[j] = static_cast<int32_t>(j);
  }
  MlaAttnParams params() {
    MlaAttnParams p;
    p.n_head = kHead, p.qk_nope = kNope, p.qk_rope = kRope, p.kv_lora = kLora, p.v_dim = kV;
    p.kq_scale = 1.0f / std::sqrt(float(kNope + kRope));
    p.n_q = n_q, p.q = q.data(), p.q_stride = kHead * (kNope + kRope);
    p.n_ctx = ctx, p.cache = cache.data(), p.cache_type = GgmlType::F16;
    p.cache_row_bytes = static_cast<int64_t>(sizeof(uint16_t)) * (kLora + kRope), p.slots = slots.data();
    p.w_uk = w_uk.data(), p.w_uk_t = w_uk_t.data(), p.w_uv = w_uv.data();
    p.out = out.data(), p.out_stride = kHead * kV;
    return p;
  }
  // Query-row pairs the chunk attends (causal).
  double pairs() const { return static_cast<double>(n_q) * (ctx - n_q) + n_q * (n_q + 1) / 2.0; }
};

void report(benchmark::State& state, double macs) {
  state.counters["GMAC/s"] = benchmark::Counter(macs / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["ms"] =
      benchmark::Counter(1e-3, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void BM_MqaDecode(benchmark::State& state) {
  AttnData d(state.range(0), 1);
  ThreadPool pool(static_cast<int>(state.range(1)));
  AttnScratch scratch;
  const auto p = d.params();
  for (auto _ : state) mla_attention_mqa(p, pool, scratch);
  report(state, kHead * ((kNope + kV) * kLora + d.pairs() * (2 * kLora + kRope)));
}

void BM_MqaChunk(benchmark::State& state) {
  AttnData d(state.range(0), kChunk);
  ThreadPool pool(static_cast<int>(state.range(1)));
  AttnScratch scratch;
  const auto p = d.params();
  for (auto _ : state) mla_attention_mqa(p, pool, scratch);
  report(state, kHead * (kChunk * (kNope + kV) * kLora + d.pairs() * (2 * kLora + kRope)));
}

void BM_MhaChunk(benchmark::State& state) {
  AttnData d(state.range(0), kChunk);
  ThreadPool pool(static_cast<int>(state.range(1)));
  AttnScratch scratch;
  const auto p = d.params();
  for (auto _ : state) mla_attention_mha(p, pool, scratch);
  report(state, kHead * (d.ctx * (kNope + kV) * kLora + d.pairs() * (kNope + kRope + kV)));
}

void BM_IndexerDecode(benchmark::State& state) {
  const int64_t ctx = state.range(0);
  ThreadPool pool(static_cast<int>(state.range(1)));
  IndexerScratch scratch;
  const auto keys_f32 = randn(ctx * kIdxDim, 6);
  std::vector<uint16_t> keys(ctx * kIdxDim);
  for (int64_t j = 0; j < ctx; ++j)
    quantize_row(GgmlType::F16, keys_f32.data() + j * kIdxDim, keys.data() + j * kIdxDim, kIdxDim);
  auto q = randn(kIdxHead * kIdxDim, 7), w = randn(kIdxHead, 8, 0.1f);
  std::vector<int32_t> slots(ctx), sel(kTopK), count(1);
  for (int64_t j = 0; j < ctx; ++j) slots[j] = static_cast<int32_t>(j);
  IndexerParams p;
  p.n_head = kIdxHead, p.head_dim = kIdxDim, p.top_k = kTopK, p.n_q = 1;
  p.q = q.data(), p.q_stride = kIdxHead * kIdxDim, p.w = w.data(), p.w_stride = kIdxHead;
  p.n_ctx = ctx, p.keys = keys.data(), p.key_type = GgmlType::F16;
  p.key_row_bytes = static_cast<int64_t>(sizeof(uint16_t)) * kIdxDim, p.slots = slots.data();
  p.sel = sel.data(), p.sel_stride = kTopK, p.sel_count = count.data();
  for (auto _ : state) indexer_select(p, pool, scratch);
  report(state, static_cast<double>(kIdxHead) * kIdxDim * ctx);
}

void depth_args(benchmark::internal::Benchmark* b, std::initializer_list<int64_t> ctxs) {
  for (int64_t ctx : ctxs)
    for (int64_t t : {1, 2}) b->Args({ctx, t});
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_MqaDecode)->Name("attn/mqa_decode")->Apply([](auto* b) { depth_args(b, {2048, 8192, 32768}); });
BENCHMARK(BM_MqaChunk)->Name("attn/mqa_chunk")->Apply([](auto* b) { depth_args(b, {2048, 8192}); });
BENCHMARK(BM_MhaChunk)->Name("attn/mha_chunk")->Apply([](auto* b) { depth_args(b, {2048, 8192}); });
BENCHMARK(BM_IndexerDecode)->Name("indexer/decode")->Apply([](auto* b) { depth_args(b, {8192, 32768}); });

}  // namespace
}  // namespace mla
