#pragma once
// Seeded normal samples for kernel tests and benchmarks: the same seed gives the same values.
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace mla {

inline std::vector<float> randn(size_t n, uint32_t seed, float sd = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

}  // namespace mla
