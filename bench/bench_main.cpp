// main() of the benchmark binaries: the quant kernels' family from MLA_SIMD / MLA_REPACK (as the
// test binaries take it: tests/support/kernel_env.h; by default the best this CPU runs), then
// every benchmark.
#include <benchmark/benchmark.h>

#include "../tests/support/kernel_env.h"

int main(int argc, char** argv) {
  mla::set_kernel_choice(mla::kernel_choice_from_env());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
