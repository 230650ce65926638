#pragma once
// mla bench --prefix-reuse P,S: time to first token of requests that share a P-token prefix and
// end in their own S-token suffix, with the prefix found nowhere (cold), in the KV cache (tier 0),
// in host RAM (tier 1, after the KV cache gave its blocks away) and on disk after a restart
// (tier 2, a new engine over the same --kv-cache-dir).
#include <cstdint>
#include <string>

#include "cli/engine_args.h"

namespace mla::cli {

struct PrefixReuseArgs {
  std::string model;
  int n_prefix = 0;
  int n_suffix = 0;
  int reps = 1;
  bool json = false;
  uint64_t seed = 1;
  std::string dir;  // "": a temporary directory, removed afterwards
};

// setup: the bench's engine flags (one sequence at a time); the cache, prefix caching and the
// tiers are set here. A single process only.
void prefix_reuse_bench(const PrefixReuseArgs& a, EngineSetup setup);

}  // namespace mla::cli
