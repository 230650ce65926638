// Quant kernel benchmarks, single-threaded: row dot products (reference and AVX2) reported as
// GB/s of weight bytes, plus memory-bandwidth probes that give the roofline to compare with.
//
//   dot/<TYPE>/<isa>/hot   weights fit in L2 (1 MiB): the kernel's own throughput
//   dot/<TYPE>/<isa>/cold  weights far exceed the LLC (MLA_BENCH_COLD_MIB, default 1024 MiB):
//                          what a decode step sees; AVX2 kernels only (the reference kernels are
//                          compute-bound, so hot already says what they do). <isa> avx2 is the
//                          family's SIMD row dot: for the trellis types (IQ1_KT..IQ4_KT) the
//                          avx512 family's own, MLA_SIMD=avx2 for the AVX2 one
//   dequantize/<TYPE>/<isa>  the hot matrix to floats, GB/s of weight bytes
//   quantize/<TYPE>/<isa>    one 4096-float activation row, GB/s of floats read
//   gemm/<TYPE>/<layout>/tN  matmul_rows over the hot matrix (256 rows of 2048, or of
//                          MLA_BENCH_GEMM_COLS: 16384 is attn_output's width at GLM-5) with N tokens,
//                          `packed` (16-row groups, AVX-512 VNNI), `packed_avx2` (the same groups,
//                          AVX2 kernels: MLA_SIMD=avx2 or a CPU without AVX-512) or `rows`
//                          (row-major vec_dot / four-row kernels); counter GMAC/s of multiply-adds
//   gemv/<TYPE>/<layout>/cold  the decode step's GEMV: one token against a cold matrix (packed, or
//                          `rows`: the file's layout with the row-dot kernels) of
//                          MLA_BENCH_COLD_MIB (lm_head-like rows of 2048), 1 and 2 threads
//                          (matmul's thread split); GB/s of packed weight bytes per wall second
//                          and per CPU second (a memory-bound kernel's stalls count as CPU time),
//                          and per wall second over the bytes the file's rows hold (file_GB/s)
//   peak/vnni_dpbusd/<threads>  the packed kernels' ceiling: independent vpdpbusd chains in
//                          registers (64 multiply-adds each), GMAC/s over wall time
//   membw/read_sum         sum of a cold buffer of uint64 (read bandwidth), 1 and 2 threads
//   membw/memcpy           memcpy between cold buffers (bytes counted once per direction)
//
// Rates are per CPU second (Google Benchmark's default), which keeps them meaningful on a
// shared, loaded machine.
//
// A kernel runs at the roofline when its cold GB/s equals membw/read_sum's.
#include <benchmark/benchmark.h>
#include <immintrin.h>
// GCC 12 flags the deliberately undefined pass-through operand of its own AVX-512 intrinsics.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../tests/quant/quant_test_util.h"
#include "../tests/support/kernel_env.h"
#include "kernels/matmul.h"
#include "quant/packed.h"
#include "quant/quant.h"

namespace mla {
namespace {

constexpr int64_t kCols = 4096;  // row length: a typical hidden size
constexpr size_t kHotBytes = size_t{1} << 20;

size_t cold_bytes() {
  const char* env = std::getenv("MLA_BENCH_COLD_MIB");
  const long mib = env ? std::atol(env) : 1024;
  return static_cast<size_t>(mib > 0 ? mib : 1024) << 20;
}

// The gemm benchmarks' row length: MLA_BENCH_GEMM_COLS (a multiple of 256), default 2048.
int64_t gemm_cols() {
  const char* env = std::getenv("MLA_BENCH_GEMM_COLS");
  const long cols = env ? std::atol(env) : 2048;
  return cols > 0 && cols % 256 == 0 ? cols : 2048;
}

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A weight matrix of whole rows, about `bytes` large: random quant bits with sane scales (so
// no NaN, Inf or denormal slows a kernel down), or normal values for the float types.
struct Matrix {
  GgmlType type{};
  size_t bytes = 0;
  int64_t n_rows = 0;
  int64_t row_bytes = 0;
  std::unique_ptr<uint8_t[]> data;
  std::vector<uint8_t> act;  // one activation row in vec_dot_type(type)
};

void fill(Matrix& m) {
  const auto& tr = ggml_traits(m.type);
  const size_t total = static_cast<size_t>(m.n_rows * m.row_bytes);
  uint64_t s = 42;
  for (size_t i = 0; i + 8 <= total; i += 8) {
    const uint64_t v = splitmix64(s);
    std::memcpy(m.data.get() + i, &v, 8);
  }
  std::mt19937 rng(1);
  if (tr.block_elems == 1) {  // float types: tile one row of real values
    const auto row = testing::random_row(m.type, kCols, rng, testing::ScaleCase::Random);
    for (int64_t r = 0; r < m.n_rows; ++r) std::memcpy(m.data.get() + r * m.row_bytes, row.data(), row.size());
    return;
  }
  // Scales as random_row makes them: random bits there could be subnormal, whose float products
  // take microcode assists and would time those instead of the kernel.
  const auto offsets = testing::half_scale_offsets(m.type);
  const int64_t blocks_per_row = (m.row_bytes - tr.row_meta_bytes) / tr.block_bytes;
  for (int64_t r = 0; r < m.n_rows; ++r) {
    uint8_t* row = m.data.get() + r * m.row_bytes;
    if (tr.row_meta_bytes > 0) {
      const uint16_t h = testing::pick_half_scale(testing::ScaleCase::Random, rng, 0);
      const float d = fp16_to_fp32(h);
      std::memcpy(row, tr.row_meta_bytes == 4 ? static_cast<const void*>(&d) : &h, tr.row_meta_bytes);
    }
    for (int64_t b = 0; b < blocks_per_row; ++b) {
      uint8_t* blk = row + tr.row_meta_bytes + b * tr.block_bytes;
      for (int off : offsets) {
        const uint16_t h = testing::pick_half_scale(testing::ScaleCase::Random, rng, 0);
        std::memcpy(blk + off, &h, 2);
      }
      if (m.type == GgmlType::MXFP4) blk[0] = static_cast<uint8_t>(120 + b % 16);
    }
  }
}

// The matrix of the running benchmark; consecutive benchmarks of one type and size share it.
const Matrix& matrix(GgmlType t, size_t bytes) {
  static Matrix m;
  if (m.data && m.type == t && m.bytes == bytes) return m;
  m = Matrix{};
  m.type = t;
  m.bytes = bytes;
  m.row_bytes = ggml_row_bytes(t, kCols);
  m.n_rows = std::max<int64_t>(1, static_cast<int64_t>(bytes) / m.row_bytes);
  m.data.reset(new uint8_t[static_cast<size_t>(m.n_rows * m.row_bytes)]);
  fill(m);
  std::mt19937 rng(2);
  m.act = testing::quantized(vec_dot_type(t), testing::random_floats(kCols, rng, 1.0f));
  return m;
}

// Dequantization of the hot matrix, GB/s of weight bytes read.
void bm_dequantize(benchmark::State& state, GgmlType t, QuantIsa isa) {
  const DequantizeFn dequantize = find_dequantize(t, isa);
  const Matrix& m = matrix(t, kHotBytes);
  std::vector<float> row(kCols);
  for (auto _ : state) {
    for (int64_t r = 0; r < m.n_rows; ++r) dequantize(m.data.get() + r * m.row_bytes, row.data(), kCols);
    benchmark::DoNotOptimize(row.data());
  }
  state.SetBytesProcessed(state.iterations() * m.n_rows * m.row_bytes);
}

// Quantization of one activation row (what every matmul does first), GB/s of floats read.
void bm_quantize(benchmark::State& state, GgmlType t, QuantIsa isa) {
  const QuantizeFn quantize = find_quantize(t, isa);
  std::mt19937 rng(3);
  const auto x = testing::random_floats(kCols, rng, 1.0f);
  std::vector<uint8_t> q(static_cast<size_t>(ggml_row_bytes(t, kCols)));
  for (auto _ : state) {
    quantize(x.data(), q.data(), kCols);
    benchmark::DoNotOptimize(q.data());
  }
  state.SetBytesProcessed(state.iterations() * kCols * static_cast<int64_t>(sizeof(float)));
}

void bm_dot(benchmark::State& state, GgmlType t, QuantIsa isa, size_t bytes) {
  const VecDotFn dot = find_vec_dot(t, isa);
  const Matrix& m = matrix(t, bytes);
  for (auto _ : state) {
    float sum = 0;
    for (int64_t r = 0; r < m.n_rows; ++r) sum += dot(kCols, m.data.get() + r * m.row_bytes, m.act.data());
    benchmark::DoNotOptimize(sum);
  }
  state.SetBytesProcessed(state.iterations() * m.n_rows * m.row_bytes);
  state.counters["rows"] = static_cast<double>(m.n_rows);
}

// One matmul_rows call over a hot 256 x 2048 weight with n_tok activation rows.
void bm_gemm(benchmark::State& state, GgmlType t, bool packed, int n_tok) {
  constexpr int64_t kRows = 256;
  const int64_t kGemmCols = gemm_cols();
  Matrix m;
  m.type = t;
  m.row_bytes = ggml_row_bytes(t, kGemmCols);
  m.n_rows = kRows;
  m.data.reset(new uint8_t[static_cast<size_t>(kRows * m.row_bytes)]);
  fill(m);
  WeightMatrix w{t, m.data.get(), kGemmCols, kRows, m.row_bytes};
  PackedWeightStore store;
  if (packed && !repack_weight(w, kRows, store)) {
    state.SkipWithError("no packed kernel on this CPU");
    return;
  }
  std::mt19937 rng(4);
  const auto x = testing::random_floats(kGemmCols * n_tok, rng, 1.0f);
  std::vector<uint8_t> buf;
  const QuantizedActivations act = quantize_activations(t, x.data(), kGemmCols, n_tok, kGemmCols, nullptr, buf);
  std::vector<float> y(static_cast<size_t>(kRows * n_tok));
  for (auto _ : state) {
    matmul_rows(w, act, n_tok, y.data(), kRows, 0, kRows);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GMAC/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * kRows * kGemmCols * n_tok / 1e9, benchmark::Counter::kIsRate);
}

// One decode-shaped matmul (one token) over a cold packed matrix of about cold_bytes(), with
// matmul's own thread pool and split.
void bm_gemv_cold(benchmark::State& state, GgmlType t, bool packed, int n_threads) {
  constexpr int64_t kGemvCols = 2048;
  const int64_t row_bytes = ggml_row_bytes(t, kGemvCols);
  const int64_t n_rows = std::max<int64_t>(16, static_cast<int64_t>(cold_bytes()) / row_bytes / 16 * 16);
  Matrix m;
  m.type = t;
  m.row_bytes = row_bytes;
  m.n_rows = n_rows;
  m.data.reset(new uint8_t[static_cast<size_t>(n_rows * row_bytes)]);
  fill(m);
  WeightMatrix w{t, m.data.get(), kGemvCols, n_rows, row_bytes};
  PackedWeightStore store;
  if (packed) {
    if (!repack_weight(w, n_rows, store)) {
      state.SkipWithError("no packed kernel on this CPU");
      return;
    }
    m.data.reset();  // only the groups are read
    w.data = nullptr;
  }
  std::mt19937 rng(5);
  const auto x = testing::random_floats(kGemvCols, rng, 1.0f);
  std::vector<float> y(static_cast<size_t>(n_rows));
  ThreadPool pool(n_threads);
  MatmulScratch scratch;
  const auto cpu0 = std::clock();
  for (auto _ : state) {
    matmul(w, x.data(), kGemvCols, 1, y.data(), n_rows, pool, scratch);
    benchmark::DoNotOptimize(y.data());
  }
  const double cpu_s = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
  const double read = packed ? static_cast<double>(store.bytes()) : static_cast<double>(n_rows * row_bytes);
  const double bytes = static_cast<double>(state.iterations()) * read;
  state.counters["GB/s_wall"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsRate);
  state.counters["GB/s_cpu"] = cpu_s > 0 ? bytes / 1e9 / cpu_s * n_threads : 0.0;
  state.counters["MB"] = read / 1e6;
  // The same time over the bytes the file stores (a packed group may be larger than its rows).
  state.counters["file_GB/s_wall"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * static_cast<double>(n_rows * row_bytes) / 1e9,
                         benchmark::Counter::kIsRate);
}

// vpdpbusd back to back on 12 independent accumulators per thread (more than the instruction's
// latency times its throughput), so the rate is the core's integer multiply-add ceiling.
void bm_peak_vnni(benchmark::State& state, int n_threads) {
#if defined(__AVX512F__) && defined(__AVX512VNNI__)
  constexpr int kChains = 12;
  constexpr int64_t kSteps = int64_t{1} << 16;
  ThreadPool pool(n_threads);
  std::vector<int64_t> sink(n_threads);
  volatile int32_t seed = 0x01020304;  // opaque to the compiler
  for (auto _ : state) {
    pool.run([&](int t) {
      const __m512i a = _mm512_set1_epi32(seed), b = _mm512_set1_epi32(seed + 1);
      __m512i acc[kChains];
      for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_epi32(i);
      for (int64_t s = 0; s < kSteps; ++s)
        for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
      int64_t sum = 0;
      for (int i = 0; i < kChains; ++i) sum += _mm512_reduce_add_epi32(acc[i]);
      sink[t] = sum;
    });
  }
  benchmark::DoNotOptimize(sink.data());
  state.counters["GMAC/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * kSteps * kChains * 64 * n_threads / 1e9, benchmark::Counter::kIsRate);
#else
  (void)n_threads;
  state.SkipWithError("this build has no AVX-512 VNNI (the packed kernels' instruction)");
#endif
}

// Cold buffers for the bandwidth probes, shared by all of them.
struct ColdBuffers {
  size_t bytes;
  std::unique_ptr<uint64_t[]> a, b;
  explicit ColdBuffers(size_t n) : bytes(n), a(new uint64_t[n / 8]), b(new uint64_t[n / 8]) {
    for (size_t i = 0; i < n / 8; ++i) a[i] = b[i] = i * 0x9E3779B97F4A7C15ull;
  }
};
ColdBuffers& cold() {
  static ColdBuffers buffers(cold_bytes());
  return buffers;
}

// Sum of n uint64 with four 256-bit accumulators: enough loads in flight to saturate memory.
__attribute__((target("avx2"))) uint64_t sum_avx2(const uint64_t* p, size_t n) {
  __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
  for (size_t i = 0; i + 16 <= n; i += 16)
    for (int k = 0; k < 4; ++k)
      acc[k] = _mm256_add_epi64(acc[k], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 4 * k)));
  alignas(32) uint64_t out[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out),
                     _mm256_add_epi64(_mm256_add_epi64(acc[0], acc[1]), _mm256_add_epi64(acc[2], acc[3])));
  return out[0] + out[1] + out[2] + out[3];
}
uint64_t sum_scalar(const uint64_t* p, size_t n) {
  uint64_t s = 0;
  for (size_t i = 0; i < n; ++i) s += p[i];
  return s;
}

// Each thread reads its own slice of the cold buffer.
void bm_read_sum(benchmark::State& state) {
  ColdBuffers& c = cold();
  const size_t n = c.bytes / 8 / state.threads();
  const uint64_t* p = c.a.get() + n * state.thread_index();
  const bool avx2 = __builtin_cpu_supports("avx2");
  for (auto _ : state) benchmark::DoNotOptimize(avx2 ? sum_avx2(p, n) : sum_scalar(p, n));
  state.SetBytesProcessed(state.iterations() * n * 8);
}

void bm_memcpy(benchmark::State& state) {
  ColdBuffers& c = cold();
  for (auto _ : state) {
    std::memcpy(c.b.get(), c.a.get(), c.bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * c.bytes * 2);
}

// The packed rows' layout field: `packed` for the AVX-512 kernels, `packed_avx2` for the AVX2
// family (MLA_SIMD=avx2, a CPU without AVX-512 VNNI, or the x86-64-v3 mla_bench_avx2).
std::string packed_layout_name() {
  const std::string family = packed_gemm_family();
  return family == "avx512" ? "packed" : "packed_" + family;
}

const GgmlType kBenchTypes[] = {
    GgmlType::F32,    GgmlType::F16,     GgmlType::BF16,   GgmlType::Q8_0,   GgmlType::Q4_0,    GgmlType::Q5_0,
    GgmlType::Q4_K,   GgmlType::Q5_K,    GgmlType::Q6_K,   GgmlType::Q2_K,   GgmlType::Q3_K,    GgmlType::IQ4_XS,
    GgmlType::IQ4_NL, GgmlType::MXFP4,   GgmlType::IQ1_S,  GgmlType::IQ1_M,  GgmlType::IQ2_XXS, GgmlType::IQ2_XS,
    GgmlType::IQ2_S,  GgmlType::IQ3_XXS, GgmlType::IQ3_S,  GgmlType::Q6_0,   GgmlType::IQ4_K,   GgmlType::IQ5_K,
    GgmlType::IQ4_KS, GgmlType::IQ5_KS,  GgmlType::IQ2_KL, GgmlType::IQ2_K,  GgmlType::IQ3_K,   GgmlType::IQ2_KS,
    GgmlType::IQ3_KS, GgmlType::IQ4_KSS, GgmlType::IQ6_K,  GgmlType::IQ1_KT, GgmlType::IQ2_KT,  GgmlType::IQ3_KT,
    GgmlType::IQ4_KT};

[[maybe_unused]] const bool registered = [] {
  // The names below depend on the packed family, so the kernel choice main() sets from MLA_SIMD /
  // MLA_REPACK is set here first: looking kernels up would otherwise fix the default before main.
  set_kernel_choice(kernel_choice_from_env());
  for (GgmlType t : kBenchTypes) {
    for (QuantIsa isa : {QuantIsa::Ref, QuantIsa::Avx2}) {
      if (!find_vec_dot(t, isa)) continue;
      const std::string name = std::string("dot/") + std::string(ggml_type_name(t)) + "/" + quant_isa_name(isa);
      benchmark::RegisterBenchmark((name + "/hot").c_str(), bm_dot, t, isa, kHotBytes)->Unit(benchmark::kMicrosecond);
    }
  }
  for (GgmlType t : kBenchTypes) {
    if (!find_vec_dot(t, QuantIsa::Avx2)) continue;
    const std::string name = std::string("dot/") + std::string(ggml_type_name(t)) + "/avx2/cold";
    benchmark::RegisterBenchmark(name.c_str(), bm_dot, t, QuantIsa::Avx2, cold_bytes())->Unit(benchmark::kMillisecond);
  }
  for (GgmlType t : kBenchTypes) {
    for (QuantIsa isa : {QuantIsa::Ref, QuantIsa::Avx2}) {
      if (!find_dequantize(t, isa) || !find_dequantize(t, QuantIsa::Avx2)) continue;  // types with a SIMD kernel
      const std::string name = std::string("dequantize/") + std::string(ggml_type_name(t)) + "/" + quant_isa_name(isa);
      benchmark::RegisterBenchmark(name.c_str(), bm_dequantize, t, isa)->Unit(benchmark::kMicrosecond);
    }
  }
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q8_K, GgmlType::F16, GgmlType::BF16}) {
    for (QuantIsa isa : {QuantIsa::Ref, QuantIsa::Avx2}) {
      if (!find_quantize(t, isa)) continue;
      const std::string name = std::string("quantize/") + std::string(ggml_type_name(t)) + "/" + quant_isa_name(isa);
      benchmark::RegisterBenchmark(name.c_str(), bm_quantize, t, isa)->Unit(benchmark::kMicrosecond);
    }
  }
  for (GgmlType t : kBenchTypes)
    for (bool packed : {false, true})
      for (int n_tok : {1, 8, 64}) {
        if (!packed_layout_exists(t) || !find_vec_dot(t, QuantIsa::Avx2)) continue;
        const std::string name = std::string("gemm/") + std::string(ggml_type_name(t)) + "/" +
                                 (packed ? packed_layout_name() : "rows") + "/t" + std::to_string(n_tok);
        benchmark::RegisterBenchmark(name.c_str(), bm_gemm, t, packed, n_tok)->Unit(benchmark::kMicrosecond);
      }
  for (GgmlType t : kBenchTypes)
    for (bool packed : {false, true})
      for (int n_threads : {1, 2}) {
        if (!packed_layout_exists(t) || !find_vec_dot(t, QuantIsa::Avx2)) continue;
        const std::string name = std::string("gemv/") + std::string(ggml_type_name(t)) + "/" +
                                 (packed ? packed_layout_name() : "rows") +
                                 "/cold/threads:" + std::to_string(n_threads);
        benchmark::RegisterBenchmark(name.c_str(), bm_gemv_cold, t, packed, n_threads)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
      }
  for (int n_threads : {1, 2})
    benchmark::RegisterBenchmark(("peak/vnni_dpbusd/" + std::to_string(n_threads)).c_str(), bm_peak_vnni, n_threads)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("membw/read_sum", bm_read_sum)->Unit(benchmark::kMillisecond)->ThreadRange(1, 2);
  benchmark::RegisterBenchmark("membw/memcpy", bm_memcpy)->Unit(benchmark::kMillisecond);
  return true;
}();

}  // namespace
}  // namespace mla
