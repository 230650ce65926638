#pragma once
// The engine flags `mla run`, `mla serve` and `mla bench` share (and the few `mla doctor` and
// `mla perplexity` take): registered in one place with one set of defaults, and turned into the
// runner's and the engine's options by one builder. Flag names are vLLM's where vLLM has the flag;
// an older spelling stays accepted for one release and logs a deprecation warning when used.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"    // EngineConfig
#include "kv/latent_cache.h"  // KvCacheOptions
#include "model/deepseek2.h"  // ModelOptions
#include "quant/kernel_choice.h"

namespace mla::cli {

struct CommonOptions;

// The values of the shared flags; the initializers are the defaults every command shows (the
// engine's and the cache's own, where they have one).
struct EngineArgs {
  int threads = 0;                          // -t: 0 → every hardware thread
  std::string mla_path = "auto";            // auto | mha | mqa
  std::string attention_precision = "f32";  // exact | f32 (ModelOptions::exact_attention); mla doctor: exact
  int max_num_batched_tokens = EngineConfig{}.max_num_batched_tokens;  // token budget per engine step
  std::string kv_cache_dtype = "f16";
  std::string speculative_config;  // {"method": "mtp", "num_speculative_tokens": K}; "": off
  int max_num_seqs = EngineConfig{}.max_num_seqs;
  int max_model_len = EngineConfig{}.max_model_len;  // 0: the model's context length, capped by the KV cache
  bool enable_prefix_caching = EngineConfig{}.enable_prefix_caching;
  int64_t kv_cache_tokens = 0;  // 0 and no memory: KvCacheOptions::kDefaultTokens
  std::string kv_cache_memory;  // bytes, e.g. "2G"
  int block_size = KvCacheOptions{}.block_size;
  // The prefix cache's lower tiers (kv/tier_store.h): host RAM bytes, a directory and its cap.
  std::string kv_cache_host_bytes;      // e.g. "8G"; "": no host tier
  std::string kv_cache_dir;             // "": no disk tier
  std::string kv_cache_disk_bytes;      // e.g. "100G"; "": no cap but the disk's
  bool no_prefault = false;             // --no-prefault: ModelOptions::prefault off
  std::string weights_memory;           // --weights-memory bytes, e.g. "12G"; "": every weight resident
  std::string expert_eviction = "lfu";  // --expert-eviction lfu | lru (for comparisons)
  int expert_io_threads = 2;            // --expert-io-threads: read-ahead I/O threads, 0 off
  std::string simd = "auto";            // --simd auto | avx512 | avx2 | scalar (KernelChoice::max_simd)
  bool no_repack = false;               // --no-repack: KernelChoice::repack off
  // One line per deprecated spelling on this command line ("OLD is deprecated, use NEW"),
  // logged as a warning by build_engine_setup.
  std::vector<std::string> deprecated_used;
};

// Which shared flags a command registers (all by default). `capacity` is --max-num-seqs,
// --max-model-len, --[no-]enable-prefix-caching, --kv-cache-tokens, --kv-cache-memory,
// --block-size and the tier flags (--kv-cache-host-bytes, --kv-cache-dir, --kv-cache-disk-bytes):
// mla bench leaves them out (one sequence at a time, a cache sized to its tests).
struct EngineFlagSet {
  bool threads = true;                 // -t,--threads
  bool mla_path = true;                // --mla-path
  bool attention_precision = true;     // --attention-precision
  bool max_num_batched_tokens = true;  // --max-num-batched-tokens
  bool kv_cache_dtype = true;          // --kv-cache-dtype
  bool speculative_config = true;      // --speculative-config
  bool prefault = true;                // --no-prefault
  bool weights_memory = true;          // --weights-memory, --expert-eviction, --expert-io-threads
  bool kernels = true;                 // --simd, --no-repack
  bool capacity = true;
};

void add_engine_args(CLI::App* cmd, EngineArgs& a, EngineFlagSet which = {});

// -t as a thread count: the value given, or every hardware thread.
int resolve_threads(int threads);

// --attention-precision as ModelOptions::exact_attention: exact → true, f32 → false; throws
// mla::Error for anything else.
bool parse_attention_precision(const std::string& value);

// What the engine of a command is built from. engine.eos_token_ids are the loaded model's: the
// caller sets them once it has the runner.
struct EngineSetup {
  MlaPathPolicy policy = MlaPathPolicy::Auto;
  ModelOptions model;
  KvCacheOptions kv;
  EngineConfig engine;
  KernelChoice kernels;    // set for the process by build_engine_setup
  bool deepseek4 = false;  // the model is deepseek4 (adapt_setup_for_deepseek4): its own cache and attention
};

// The one builder: logs a warning for each deprecated spelling used (rank 0 only under mpirun),
// the environment variables MLA_PREFAULT, MLA_SIMD and MLA_REPACK among them (still read as the
// flags they became: MLA_PREFAULT=0, MLA_SIMD=avx2|scalar, MLA_REPACK=0), checks the values, and
// sets the quant kernels' family for the process (set_kernel_choice: call it before any kernel
// runs, once per process or again with the same flags). need_mtp loads the model's MTP layer even
// without --speculative-config (run's --mtp-logits). With the MTP layer the run must be one process, and
// model.max_batch_tokens is widened by max_num_seqs (the MTP pass carries up to one row more per sequence). Throws
// mla::Error naming the command and the flag.
EngineSetup build_engine_setup(const EngineArgs& a, const CommonOptions& common, std::string_view command,
                               bool need_mtp = false);

// One info line with what the engine runs with ("engine: max_num_batched_tokens 2048, ..."), logged
// by each command once its model has loaded (so a file that does not load stays a one-line error).
void log_engine_setup(const EngineSetup& s);

}  // namespace mla::cli
