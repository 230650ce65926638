#pragma once
// mla bench's measures around the model: the read-bandwidth probe (--membw) and what the file
// holds (type, size, parameters, the weight bytes every decode token reads).
#include <cstdint>
#include <string>

namespace mla {
class GgufFile;
struct Deepseek4Config;
}  // namespace mla

namespace mla::cli {

// Bytes per second read by all threads summing disjoint slices of one buffer (first touched by
// the thread that reads it), the best of `passes` passes.
double measure_read_bandwidth(int n_threads, int64_t bytes, int passes);

struct ModelFacts {
  std::string description;  // "deepseek2 Q4_K_M"
  uint64_t size_bytes = 0;  // tensor data
  int64_t n_params = 0;
  int64_t dense_bytes = 0;  // read by every decode token: all but token_embd and the routed experts
};
ModelFacts describe(const GgufFile& f);

// deepseek4 decode: the bytes of n_expert_used routed experts (gate, up, down) in every layer, what
// a token reads of them (its k experts are distinct).
int64_t deepseek4_routed_bytes(const GgufFile& f, const Deepseek4Config& c);

std::string human_bytes(double b);   // "1.50 GiB", "12.00 MiB"
std::string human_params(double n);  // "1.50 B", "12.00 M"

}  // namespace mla::cli
