// MLA attention and DSA indexer kernels at GLM-5's attention widths (64 heads, kv_lora 512,
// rope 64, nope 192, v 256; indexer 32 x 128), F16 cache, random data: the depth-dependent part of
// a decode step and of a prefill chunk, without the weights. Wall time (the kernels are threaded);
// counters: GMAC/s over the multiply-adds the kernel must do (scores and outputs over the rows
// attended, plus MQA's absorb/un-absorb or MHA's decompression), and ms per call.
//
//   attn/mqa_decode/<ctx>/<threads>      one query over ctx cached rows (absorbed path)
//   attn/mqa_decode_q8w/<ctx>/<threads>  the same with W_UK / W_UV read as Q8_0 rows (as a Q4_K_M
//                                        file stores attn_k_b), converted a head at a time
//   attn/v2lite_decode/<ctx>/<threads>   one query at DeepSeek-V2-Lite's widths (16 heads, nope 128,
//                                        v 128), Q8_0 W_UK / W_UV: the issue-9 model's depth cost
//                                        (4160: the last step of tg64@d4096, a short last part)
//   attn/mqa_chunk/<ctx>/<threads>       a 512-token prefill chunk ending at ctx (causal), MQA
//   attn/mha_chunk/<ctx>/<threads>       the same chunk down the decompressed (MHA) path
//   attn/v3_mha_chunk2048/<ctx>/<threads> a 2,048-token chunk ending at ctx down the MHA path at
//                                        DeepSeek-V3's widths (128 heads, nope 128, v 128)
//   indexer/decode/<ctx>/<threads>       one query's indexer scores and top-2048 over ctx keys
//   attn/exact/glm5_decode_q4km/<ctx>/<threads>
//                                        one exact query at GLM-5's widths with W_UK as Q8_0 and W_UV
//                                        as Q6_K rows (what `mla gguf quantize ... q4_k_m` stores)
//   attn/exact/glm5_decode_q6_0/<ctx>/<threads>
//                                        the same with W_UK and W_UV as Q6_0 rows (ik_llama.cpp
//                                        GLM-5 recipes' attn_k_b / attn_v_b)
//   attn/exact/v2lite_decode_q4km/<ctx>/<threads>
//                                        the same at V2-Lite's widths, W_UV as Q4_K (ditto)
//   attn/exact/...                       the exact kernels (attention_exact.cpp, `--attention-precision exact`)
//                                        on the same shapes, and both paths of a 512-token chunk at
//                                        V2-Lite's widths (ctx 512: the pp512 prefill)
//
//   peak/f64_fma/<threads>               the host's ceiling for those kernels: independent double
//                                        multiply-adds in registers (no memory), in the build's
//                                        widest double vectors (8 lanes AVX-512, 4 AVX2, 2 scalar)
//
//   build/bench/mla_bench --benchmark_filter='attn|indexer|peak'
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "../tests/support/random.h"
#include "kernels/attention.h"
#include "kernels/indexer.h"
#include "quant/quant.h"

namespace mla {
namespace {

constexpr int64_t kRope = 64, kLora = 512;
struct Widths {
  int64_t head, nope, v;
};
constexpr Widths kGlm5{64, 192, 256}, kV2Lite{16, 128, 128}, kV3{128, 128, 128};
constexpr int64_t kHead = kGlm5.head, kNope = kGlm5.nope, kV = kGlm5.v;
constexpr int64_t kIdxHead = 32, kIdxDim = 128, kTopK = 2048;
constexpr int64_t kChunk = 512;

// The latent rows of ctx tokens as an F16 cache (slots in order) and the weights (F32, and W_UK
// / W_UV also as stored rows: W_UK in uk_type, W_UV in uv_type).
struct AttnData {
  int64_t ctx, n_q;
  Widths w;
  std::vector<uint16_t> cache;
  std::vector<float> q, w_uk, w_uk_t, w_uv, out;
  GgmlType uv_type, uk_type;  // W_UV's and W_UK's stored types
  std::vector<uint8_t> w_uk_q, w_uv_q;
  std::vector<int32_t> slots;
  AttnData(int64_t ctx_, int64_t n_q_, Widths w_ = kGlm5, GgmlType uv_type_ = GgmlType::Q8_0,
           GgmlType uk_type_ = GgmlType::Q8_0)
      : ctx(ctx_), n_q(n_q_), w(w_), uv_type(uv_type_), uk_type(uk_type_) {
    const int64_t H = w.head, N = w.nope, V = w.v;
    const int64_t row = kLora + kRope;
    const auto rows = randn(ctx * row, 1);
    cache.resize(ctx * row);
    for (int64_t j = 0; j < ctx; ++j) quantize_row(GgmlType::F16, rows.data() + j * row, cache.data() + j * row, row);
    q = randn(n_q * H * (N + kRope), 2, 0.3f);
    w_uk = randn(H * kLora * N, 3, 1.0f / std::sqrt(float(kLora)));
    w_uk_t = randn(H * N * kLora, 4, 1.0f / std::sqrt(float(kLora)));
    w_uv = randn(H * V * kLora, 5, 1.0f / std::sqrt(float(kLora)));
    w_uk_q = stored_rows(w_uk, N, uk_type);
    w_uv_q = stored_rows(w_uv, kLora, uv_type);
    out.resize(n_q * H * V);
    slots.resize(ctx);
    for (int64_t j = 0; j < ctx; ++j) slots[j] = static_cast<int32_t>(j);
  }
  static std::vector<uint8_t> stored_rows(const std::vector<float>& x, int64_t cols, GgmlType t) {
    const int64_t rb = ggml_row_bytes(t, cols), rows = static_cast<int64_t>(x.size()) / cols;
    std::vector<uint8_t> q(rows * rb);
    for (int64_t r = 0; r < rows; ++r) quantize_row(t, x.data() + r * cols, q.data() + r * rb, cols);
    return q;
  }
  MlaAttnParams params(bool stored_weights = false) {
    const int64_t H = w.head, N = w.nope, V = w.v;
    MlaAttnParams p;
    p.n_head = H, p.qk_nope = N, p.qk_rope = kRope, p.kv_lora = kLora, p.v_dim = V;
    p.kq_scale = 1.0f / std::sqrt(float(N + kRope));
    p.n_q = n_q, p.q = q.data(), p.q_stride = H * (N + kRope);
    p.n_ctx = ctx, p.cache = cache.data(), p.cache_type = GgmlType::F16;
    p.cache_row_bytes = static_cast<int64_t>(sizeof(uint16_t)) * (kLora + kRope), p.slots = slots.data();
    p.w_uk = w_uk.data(), p.w_uk_t = w_uk_t.data(), p.w_uv = w_uv.data();
    if (stored_weights) {
      p.w_uk = MlaProj(w_uk_q.data(), uk_type, ggml_row_bytes(uk_type, N), 0);
      p.w_uv = MlaProj(w_uv_q.data(), uv_type, ggml_row_bytes(uv_type, kLora), 0);
    }
    p.out = out.data(), p.out_stride = H * V;
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

using Kernel = void (*)(const MlaAttnParams&, ThreadPool&, AttnScratch&);
template <bool kExact>
constexpr Kernel kMqa = kExact ? mla_attention_mqa_exact : mla_attention_mqa;
template <bool kExact>
constexpr Kernel kMha = kExact ? mla_attention_mha_exact : mla_attention_mha;

template <bool kExact>
void BM_MqaDecode(benchmark::State& state) {
  AttnData d(state.range(0), 1);
  ThreadPool pool(static_cast<int>(state.range(1)));
  AttnScratch scratch;
  const auto p = d.params();
  for (auto _ : state) kMqa<kExact>(p, pool, scratch);
  report(state, kHead * ((kNope + kV) * kLora + d.pairs() * (2 * kLora + kRope)));
}

// One decode query with stored projections (W_UK kUk, W_UV kUv), at GLM-5's or V2-Lite's widths.
template <int kWidths, bool kExact = false, GgmlType kUv = GgmlType::Q8_0, GgmlType kUk = GgmlType::Q8_0>
void BM_MqaDecodeQ8w(benchmark::State& state) {
  const Widths w = kWidths == 0 ? kGlm5 : kV2Lite;
  AttnData d(std::max<int64_t>(1, state.range(0)), 1, w, kUv, kUk);
  ThreadPool pool(static_cast<int>(state.range(1)));
  AttnScratch scratch;
  const auto p = d.params(true);
  for (auto _ : state) kMqa<kExact>(p, pool, scratch);
  report(state, w.head * ((w.nope + w.v) * kLora + d.pairs() * (2 * kLora + kRope)));
}

template <bool kExact, int kWidths = 0>
void BM_MqaChunk(benchmark::State& state) {
  const Widths w = kWidths == 0 ? kGlm5 : kV2Lite;
  AttnData d(state.range(0), kChunk, w);
  ThreadPool pool(static_cast<int>(state.range(1)));
  AttnScratch scratch;
  const auto p = d.params(kWidths != 0);
  for (auto _ : state) kMqa<kExact>(p, pool, scratch);
  report(state, w.head * (kChunk * (w.nope + w.v) * kLora + d.pairs() * (2 * kLora + kRope)));
}

// kWidths: 0 GLM-5, 1 V2-Lite, 2 DeepSeek-V3 (128 heads); kQ queries at the end of the context.
template <bool kExact, int kWidths = 0, int64_t kQ = kChunk>
void BM_MhaChunk(benchmark::State& state) {
  const Widths w = kWidths == 0 ? kGlm5 : kWidths == 1 ? kV2Lite : kV3;
  AttnData d(state.range(0), kQ, w);
  ThreadPool pool(static_cast<int>(state.range(1)));
  AttnScratch scratch;
  const auto p = d.params();
  for (auto _ : state) kMha<kExact>(p, pool, scratch);
  report(state, w.head * (d.ctx * (w.nope + w.v) * kLora + d.pairs() * (w.nope + kRope + w.v)));
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

// The double multiply-add ceiling the exact kernels are read against: independent chains per
// thread (latency 4 x two FMA pipes needs 8 in flight), all in registers.
#if defined(__AVX512F__)
using PeakVec = __m512d;
inline PeakVec peak_splat(double x) { return _mm512_set1_pd(x); }
inline PeakVec peak_fma(PeakVec a, PeakVec b, PeakVec c) { return _mm512_fmadd_pd(a, b, c); }
constexpr int kPeakChains = 16;
#elif defined(__FMA__)
using PeakVec = __m256d;
inline PeakVec peak_splat(double x) { return _mm256_set1_pd(x); }
inline PeakVec peak_fma(PeakVec a, PeakVec b, PeakVec c) { return _mm256_fmadd_pd(a, b, c); }
constexpr int kPeakChains = 12;  // of 16 registers (with the two operands)
#else
using PeakVec = __m128d;  // baseline x86-64: no FMA instruction, a multiply and an add
inline PeakVec peak_splat(double x) { return _mm_set1_pd(x); }
inline PeakVec peak_fma(PeakVec a, PeakVec b, PeakVec c) { return _mm_add_pd(_mm_mul_pd(a, b), c); }
constexpr int kPeakChains = 12;
#endif
inline double peak_sum(PeakVec a) {
  double v[sizeof(PeakVec) / sizeof(double)];
  std::memcpy(v, &a, sizeof v);
  double sum = 0;
  for (double x : v) sum += x;
  return sum;
}

void BM_PeakF64Fma(benchmark::State& state) {
  constexpr int64_t kSteps = int64_t{1} << 16;
  ThreadPool pool(static_cast<int>(state.range(0)));
  std::vector<double> sink(pool.n_threads());
  volatile double mul = 0.999999, add = 1e-9;  // opaque to the compiler
  for (auto _ : state) {
    pool.run([&](int t) {
      const PeakVec b = peak_splat(mul), c = peak_splat(add);
      PeakVec a[kPeakChains];
      for (int i = 0; i < kPeakChains; ++i) a[i] = peak_splat(1.0 + i);
      for (int64_t s = 0; s < kSteps; ++s)
        for (int i = 0; i < kPeakChains; ++i) a[i] = peak_fma(a[i], b, c);
      double sum = 0;
      for (int i = 0; i < kPeakChains; ++i) sum += peak_sum(a[i]);
      sink[t] = sum;
    });
  }
  benchmark::DoNotOptimize(sink.data());
  report(state, static_cast<double>(kSteps) * kPeakChains * (sizeof(PeakVec) / sizeof(double)) * pool.n_threads());
}

void depth_args(benchmark::internal::Benchmark* b, std::initializer_list<int64_t> ctxs) {
  for (int64_t ctx : ctxs)
    for (int64_t t : {1, 2}) b->Args({ctx, t});
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_MqaDecode<false>)->Name("attn/mqa_decode")->Apply([](auto* b) { depth_args(b, {2048, 8192, 32768}); });
BENCHMARK(BM_MqaDecodeQ8w<0>)->Name("attn/mqa_decode_q8w")->Apply([](auto* b) { depth_args(b, {1, 8192}); });
BENCHMARK(BM_MqaDecodeQ8w<1>)->Name("attn/v2lite_decode")->Apply([](auto* b) { depth_args(b, {1, 4096, 4160}); });
BENCHMARK(BM_MqaChunk<false>)->Name("attn/mqa_chunk")->Apply([](auto* b) { depth_args(b, {2048, 8192}); });
BENCHMARK(BM_MhaChunk<false>)->Name("attn/mha_chunk")->Apply([](auto* b) { depth_args(b, {2048, 8192}); });
BENCHMARK(BM_MqaChunk<false, 1>)->Name("attn/v2lite_mqa_chunk")->Apply([](auto* b) { depth_args(b, {512}); });
BENCHMARK(BM_MhaChunk<false, 1>)->Name("attn/v2lite_mha_chunk")->Apply([](auto* b) { depth_args(b, {512}); });
// A 4,096-token prompt's second 2,048-token chunk at DeepSeek-V3's 128 heads (mla bench -p 4096).
BENCHMARK(BM_MhaChunk<false, 2, 2048>)->Name("attn/v3_mha_chunk2048")->Apply([](auto* b) { depth_args(b, {4096}); });
BENCHMARK(BM_MqaDecode<true>)->Name("attn/exact/mqa_decode")->Apply([](auto* b) { depth_args(b, {1, 2048, 8192}); });
BENCHMARK(BM_MqaDecodeQ8w<1, true>)->Name("attn/exact/v2lite_decode")->Apply([](auto* b) {
  depth_args(b, {1, 4096, 4160});
});
BENCHMARK(BM_MqaDecodeQ8w<0, true, GgmlType::Q6_K>)->Name("attn/exact/glm5_decode_q4km")->Apply([](auto* b) {
  depth_args(b, {1, 4096});
});
// ik_llama.cpp recipes for GLM-5 (sokann's) store both as Q6_0.
BENCHMARK(BM_MqaDecodeQ8w<0, true, GgmlType::Q6_0, GgmlType::Q6_0>)
    ->Name("attn/exact/glm5_decode_q6_0")
    ->Apply([](auto* b) {
      depth_args(b, {1, 4096});
    });
BENCHMARK(BM_MqaDecodeQ8w<1, true, GgmlType::Q4_K>)->Name("attn/exact/v2lite_decode_q4km")->Apply([](auto* b) {
  depth_args(b, {1, 4096});
});
BENCHMARK(BM_MqaChunk<true>)->Name("attn/exact/mqa_chunk")->Apply([](auto* b) { depth_args(b, {2048}); });
BENCHMARK(BM_MhaChunk<true>)->Name("attn/exact/mha_chunk")->Apply([](auto* b) { depth_args(b, {2048}); });
BENCHMARK(BM_MqaChunk<true, 1>)->Name("attn/exact/v2lite_mqa_chunk")->Apply([](auto* b) { depth_args(b, {512}); });
BENCHMARK(BM_MhaChunk<true, 1>)->Name("attn/exact/v2lite_mha_chunk")->Apply([](auto* b) { depth_args(b, {512}); });
BENCHMARK(BM_PeakF64Fma)->Name("peak/f64_fma")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_IndexerDecode)->Name("indexer/decode")->Apply([](auto* b) { depth_args(b, {8192, 32768}); });

}  // namespace
}  // namespace mla
