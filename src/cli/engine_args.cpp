#include "cli/engine_args.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <thread>

#include "cli/common.h"
#include "engine/speculative.h"
#include "kv/latent_cache.h"
#include "parallel/world.h"
#include "quant/kernel_choice.h"
#include "util/env.h"
#include "util/error.h"
#include "util/ggml_type.h"
#include "util/log.h"

namespace mla::cli {
namespace {

void add_capacity_flags(CLI::App* cmd, EngineArgs& a) {
  cmd->add_option("--max-num-seqs", a.max_num_seqs, "Most sequences running at once")->capture_default_str();
  cmd->add_option("--max-model-len", a.max_model_len, "Context length (default: the model's, capped by the KV cache)");
  cmd->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", a.enable_prefix_caching,
                "Reuse the KV blocks of a prompt prefix seen before (default: on)");
  cmd->add_flag_callback(
         "--no-prefix-cache",
         [&a] {
           a.enable_prefix_caching = false;
           a.deprecated_used.emplace_back("--no-prefix-cache is deprecated, use --no-enable-prefix-caching");
         },
         "Old spelling of --no-enable-prefix-caching, accepted for one release")
      ->group("Deprecated");
  cmd->add_option("--kv-cache-tokens", a.kv_cache_tokens,
                  fmt::format("KV cache capacity in tokens (default: {})", KvCacheOptions::kDefaultTokens));
  cmd->add_option("--kv-cache-memory", a.kv_cache_memory, "KV cache capacity in bytes, e.g. 2G (instead of tokens)");
  cmd->add_option("--block-size", a.block_size, "Tokens per KV block")->capture_default_str();
  cmd->add_option("--kv-cache-host-bytes", a.kv_cache_host_bytes,
                  "Prefix cache tier 1: host RAM for full KV blocks kept after the KV cache reuses their slots, "
                  "e.g. 8G (default: off)");
  cmd->add_option("--kv-cache-dir", a.kv_cache_dir,
                  "Prefix cache tier 2: a directory that keeps full KV blocks on disk across restarts, one "
                  "subdirectory per model and cache layout (default: off)");
  cmd->add_option("--kv-cache-disk-bytes", a.kv_cache_disk_bytes,
                  "Cap on --kv-cache-dir's blocks, e.g. 100G; least recently used go first (default: no cap)");
}

kv::TierOptions tier_options(const EngineArgs& a, std::string_view command) {
  kv::TierOptions t;
  if (!a.kv_cache_host_bytes.empty()) t.host_bytes = parse_byte_size(a.kv_cache_host_bytes, "--kv-cache-host-bytes");
  t.dir = a.kv_cache_dir;
  if (!a.kv_cache_disk_bytes.empty()) {
    if (t.dir.empty()) fail("{}: --kv-cache-disk-bytes needs --kv-cache-dir", command);
    t.disk_bytes = parse_byte_size(a.kv_cache_disk_bytes, "--kv-cache-disk-bytes");
  }
  return t;
}

// --speculative-config and run's --mtp-logits: K, and the MTP layer loaded where it is needed.
int apply_speculative_config(const EngineArgs& a, std::string_view command, bool need_mtp, ModelOptions& mo) {
  const int n_spec = parse_speculative_config(a.speculative_config);
  if (n_spec == 0 && !need_mtp) return 0;
  if (world().size() > 1)
    fail("{}: {} runs in a single process only; this run has {} ranks", command,
         need_mtp ? "speculative decoding (--speculative-config, --mtp-logits)" : "--speculative-config",
         world().size());
  mo.mtp = true;
  mo.max_batch_tokens += a.max_num_seqs;
  return n_spec;
}

// The value of a deprecated variable that a flag replaced (nullopt when unset); set at all, it logs
// a warning naming the flag. Under mpirun rank 0 speaks for every rank (they share the environment).
std::optional<std::string> deprecated_env(std::string_view name, std::string_view command, std::string_view instead) {
  std::optional<std::string> env = env_value(name);
  if (env && !is_worker()) log().warn("{}: environment variable {} is deprecated, use {}", command, name, instead);
  return env;
}

// --no-prefault, or the deprecated MLA_PREFAULT=0.
bool prefault_enabled(const EngineArgs& a, std::string_view command) {
  const std::optional<std::string> env =
      deprecated_env("MLA_PREFAULT", command, "--no-prefault (MLA_PREFAULT=0 is read as it)");
  return !a.no_prefault && env.value_or("1") != "0";
}

// --weights-memory and --expert-eviction into the model's options.
void apply_weights_memory(const EngineArgs& a, std::string_view command, ModelOptions& mo) {
  if (a.expert_eviction != "lfu" && a.expert_eviction != "lru")
    fail("{}: --expert-eviction '{}': expected lfu or lru", command, a.expert_eviction);
  mo.expert_eviction = a.expert_eviction == "lru" ? ExpertEviction::Lru : ExpertEviction::Lfu;
  if (a.expert_io_threads < 0 || a.expert_io_threads > 64)
    fail("{}: --expert-io-threads {}: expected 0 (read on demand only) to 64", command, a.expert_io_threads);
  mo.expert_io_threads = a.expert_io_threads;
  if (a.weights_memory.empty()) return;
  mo.weights_memory = parse_byte_size(a.weights_memory, "--weights-memory");
  if (world().size() > 1)
    fail("{}: --weights-memory runs in a single process; this run has {} ranks", command, world().size());
}

// --simd and --no-repack, or the deprecated MLA_SIMD=avx2|scalar and MLA_REPACK=0 where the flag is
// not given. A family above this CPU's is refused by name.
KernelChoice kernel_choice_of(const EngineArgs& a, std::string_view command) {
  KernelChoice k;
  std::string simd = a.simd;
  if (simd == "auto")
    if (auto env = deprecated_env("MLA_SIMD", command, "--simd avx2|scalar")) simd = *env;
  k.max_simd = parse_simd_level(simd, fmt::format("{}: --simd", command));
  if (simd != "auto" && k.max_simd > cpu_simd_level())
    fail("{}: --simd {}: this CPU runs at most the {} family", command, simd, simd_level_name(cpu_simd_level()));
  const std::optional<std::string> repack =
      deprecated_env("MLA_REPACK", command, "--no-repack (MLA_REPACK=0 is read as it)");
  k.repack = !a.no_repack && repack.value_or("1") != "0";
  return k;
}

KvCacheOptions kv_cache_options(const EngineArgs& a, std::string_view command) {
  KvCacheOptions kv;
  kv.dtype = parse_cache_dtype(a.kv_cache_dtype);
  kv.block_size = a.block_size;
  kv.tokens = a.kv_cache_tokens;
  if (!a.kv_cache_memory.empty()) kv.memory_bytes = parse_byte_size(a.kv_cache_memory, "--kv-cache-memory");
  if (kv.tokens > 0 && kv.memory_bytes > 0) fail("{}: give --kv-cache-tokens or --kv-cache-memory, not both", command);
  return kv;
}

// The resolved configuration in one line, as log_engine_setup logs it.
std::string describe_engine_setup(const EngineSetup& s) {
  const EngineConfig& ec = s.engine;
  const std::string capacity = s.kv.tokens > 0         ? fmt::format("{} tokens", s.kv.tokens)
                               : s.kv.memory_bytes > 0 ? fmt::format("{} bytes", s.kv.memory_bytes)
                                                       : fmt::format("{} tokens", KvCacheOptions::kDefaultTokens);
  if (s.deepseek4)  // no latent cache, MLA paths, DSA switch or prefault: its own per-sequence states
    return fmt::format(
        "max_num_batched_tokens {}, max_num_seqs {}, max_model_len {}, prefix caching off, deepseek4 cache states "
        "F32 ({}, block {}), attention CSA/HCA + sliding window (F32), speculative tokens {}, threads {}, simd {}, "
        "repack {}",
        ec.max_num_batched_tokens, ec.max_num_seqs, ec.max_model_len > 0 ? std::to_string(ec.max_model_len) : "auto",
        capacity, s.kv.block_size, ec.num_speculative_tokens, s.model.n_threads,
        simd_level_name(std::min(s.kernels.max_simd, cpu_simd_level())), s.kernels.repack ? "on" : "off");
  return fmt::format(
      "max_num_batched_tokens {}, max_num_seqs {}, max_model_len {}, prefix caching {}, kv cache {} ({}, block {}), "
      "mla_path {}, attention {}, dsa {}, speculative tokens {}, threads {}, prefault {}, simd {}, repack {}{}{}",
      ec.max_num_batched_tokens, ec.max_num_seqs, ec.max_model_len > 0 ? std::to_string(ec.max_model_len) : "auto",
      ec.enable_prefix_caching ? "on" : "off", ggml_type_name(s.kv.dtype), capacity, s.kv.block_size,
      mla_path_policy_name(s.policy), s.model.exact_attention ? "exact" : "f32", s.model.dsa ? "on" : "off",
      ec.num_speculative_tokens, s.model.n_threads, s.model.prefault ? "on" : "off",
      simd_level_name(std::min(s.kernels.max_simd, cpu_simd_level())), s.kernels.repack ? "on" : "off",
      s.model.weights_memory <= 0
          ? std::string()
          : fmt::format(", weights memory {} bytes (experts streamed, eviction {}, {} read-ahead I/O threads)",
                        s.model.weights_memory, s.model.expert_eviction == ExpertEviction::Lru ? "lru" : "lfu",
                        s.model.expert_io_threads),
      !ec.kv_tiers.enabled() ? std::string()
                             : fmt::format(", kv tiers: host {} bytes, dir '{}' (cap {} bytes)", ec.kv_tiers.host_bytes,
                                           ec.kv_tiers.dir, ec.kv_tiers.disk_bytes));
}

}  // namespace

void add_engine_args(CLI::App* cmd, EngineArgs& a, EngineFlagSet which) {
  if (which.threads) cmd->add_option("-t,--threads", a.threads, "Compute threads (default: all hardware threads)");
  if (which.mla_path)
    cmd->add_option("--mla-path", a.mla_path,
                    "MLA attention path per sequence: auto (decode MQA; prefill chunks down the path cheaper at the "
                    "model's widths, logged at start) | mha | mqa")
        ->check(CLI::IsMember({"auto", "mha", "mqa"}))
        ->capture_default_str();
  if (which.attention_precision)
    cmd->add_option("--attention-precision", a.attention_precision,
                    "MLA attention arithmetic: f32 (F32 kernels; under --mla-path auto prompt tokens take the "
                    "prefill path and generated ones MQA, whatever the chunking) | exact (double inside, one rounding "
                    "to F32: the MHA and MQA paths give the same bits; slower at long context)")
        ->check(CLI::IsMember({"exact", "f32"}))
        ->capture_default_str();
  if (which.max_num_batched_tokens)
    cmd->add_option("--max-num-batched-tokens", a.max_num_batched_tokens,
                    "Token budget per engine step (prefill chunks + decodes)")
        ->capture_default_str();
  if (which.kv_cache_dtype)
    cmd->add_option("--kv-cache-dtype", a.kv_cache_dtype, "Latent cache dtype: f16 | f32 | bf16 | q8_0")
        ->capture_default_str();
  if (which.speculative_config)
    cmd->add_option("--speculative-config", a.speculative_config,
                    R"(Speculative decoding with the model's MTP layer, as vLLM spells it: )"
                    R"('{"method": "mtp", "num_speculative_tokens": K}', K = 1..4)");
  if (which.prefault)
    cmd->add_flag("--no-prefault", a.no_prefault,
                  "Do not map every page of the model file at load: pages are read on first use (for files "
                  "larger than memory; replaces MLA_PREFAULT=0)");
  if (which.weights_memory) {
    cmd->add_option("--weights-memory", a.weights_memory,
                    "Memory for the weights, e.g. 12G: the tensors every token reads stay resident and the routed "
                    "experts are read from the file into a cache of the rest as they are used (for files larger "
                    "than memory; default: every weight resident)");
    cmd->add_option("--expert-eviction", a.expert_eviction,
                    "With --weights-memory: which cached expert goes first, lfu (least used, counts halved as "
                    "they age) | lru (least recently used, for comparison)")
        ->check(CLI::IsMember({"lfu", "lru"}))
        ->capture_default_str();
    cmd->add_option("--expert-io-threads", a.expert_io_threads,
                    "With --weights-memory: threads reading ahead, while a layer computes, the experts the next "
                    "layer's router is predicted to pick (0: read each expert when a layer needs it)")
        ->capture_default_str();
  }
  if (which.kernels) {
    cmd->add_option("--simd", a.simd,
                    "The quant kernels' SIMD family (row dot products, packed GEMM; the attention kernels are the "
                    "build's): auto (the best this CPU runs) | avx512 | avx2 | scalar (the others, for testing; "
                    "replaces MLA_SIMD)")
        ->check(CLI::IsMember({"auto", "avx512", "avx2", "scalar"}))
        ->capture_default_str();
    cmd->add_flag("--no-repack", a.no_repack,
                  "Keep the weights in the file's row layout: no 16-row copy for the packed GEMM (saves that copy's "
                  "memory; replaces MLA_REPACK=0)");
  }
  if (which.capacity) add_capacity_flags(cmd, a);
}

bool parse_attention_precision(const std::string& value) {
  if (value == "exact") return true;
  if (value == "f32") return false;
  fail("--attention-precision '{}': expected exact or f32", value);
}

int resolve_threads(int threads) {
  return threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

EngineSetup build_engine_setup(const EngineArgs& a, const CommonOptions& common, std::string_view command,
                               bool need_mtp) {
  if (!is_worker())  // under mpirun rank 0 speaks for every rank: they share the flags
    for (const std::string& d : a.deprecated_used) log().warn("{}: {}", command, d);
  EngineSetup s;
  s.policy = parse_mla_path_policy(a.mla_path);
  s.model.n_threads = resolve_threads(a.threads);
  s.model.max_batch_tokens = a.max_num_batched_tokens;
  s.model.dsa = dsa_enabled(common);
  s.model.exact_attention = parse_attention_precision(a.attention_precision);
  s.model.prefault = prefault_enabled(a, command);
  apply_weights_memory(a, command, s.model);
  s.kernels = kernel_choice_of(a, command);
  set_kernel_choice(s.kernels);  // before the model loads: its repacking looks the kernels up
  s.kv = kv_cache_options(a, command);
  EngineConfig& ec = s.engine;
  ec.num_speculative_tokens = apply_speculative_config(a, command, need_mtp, s.model);
  ec.max_num_batched_tokens = a.max_num_batched_tokens;
  ec.max_num_seqs = a.max_num_seqs;
  ec.max_model_len = a.max_model_len;
  ec.enable_prefix_caching = a.enable_prefix_caching;
  ec.path_policy = s.policy;
  ec.kv_tiers = tier_options(a, command);
  return s;
}

void log_engine_setup(const EngineSetup& s) { log().info("engine: {}", describe_engine_setup(s)); }

}  // namespace mla::cli
