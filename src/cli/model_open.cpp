#include "cli/model_open.h"

#include <fmt/format.h>

#include "engine/deepseek2_runner.h"
#include "engine/deepseek4_runner.h"
#include "gguf/gguf.h"
#include "parallel/dist_runner.h"
#include "parallel/world.h"
#include "util/error.h"
#include "util/log.h"

namespace mla::cli {

bool is_deepseek4_file(const std::string& path) {
  // A file that does not open is not deepseek4 here: the deepseek2 open that follows names the
  // error (under mpirun collectively, with the rank that failed).
  try {
    const auto f = GgufFile::open(path, /*prefault=*/false);
    return f->opt_string("general.architecture") == std::optional<std::string>("deepseek4");
  } catch (const Error&) {
    return false;
  }
}

void adapt_setup_for_deepseek4(EngineSetup& setup, const EngineArgs& args, std::string_view command) {
  const std::string_view why = "unavailable for deepseek4 in mla.cpp";
  setup.deepseek4 = true;
  if (world().size() > 1)
    fail("{}: deepseek4 runs in a single process; this run has {} ranks (mpirun)", command, world().size());
  if (setup.engine.num_speculative_tokens > 0)
    fail("{}: --speculative-config: speculative decoding (the MTP layer) is {}", command, why);
  if (setup.model.mtp) fail("{}: --mtp-logits: the MTP layer is {}", command, why);
  if (setup.model.weights_memory > 0) fail("{}: --weights-memory: the routed-expert cache is {}", command, why);
  if (args.mla_path != "auto") fail("{}: --mla-path {}: deepseek4 has no MLA paths", command, args.mla_path);
  if (setup.model.exact_attention)
    fail("{}: --attention-precision exact: deepseek4 has one attention kernel (F32 dot tiles, double softmax sums)",
         command);
  if (!setup.model.dsa)
    fail("{}: --dsa off: deepseek4's compressed sparse attention is part of the model, not an option", command);
  if (setup.engine.kv_tiers.enabled())
    fail(
        "{}: --kv-cache-host-bytes / --kv-cache-dir: the kv cache tiers keep per-token blocks; deepseek4's cache "
        "state is per sequence",
        command);
  if (setup.kv.dtype != GgmlType::F16)
    log().warn("{}: --kv-cache-dtype {} does not apply to deepseek4: its cache state is F32", command,
               args.kv_cache_dtype);
  if (setup.engine.enable_prefix_caching) {
    setup.engine.enable_prefix_caching = false;
    log().info(
        "{}: prefix caching off for deepseek4: its cache state (window rows, compressed entries, the compressors' "
        "open windows) is per sequence, not per-token blocks",
        command);
  }
}

namespace {

OpenedModel open_deepseek4(const std::string& path, const EngineSetup& setup) {
  Deepseek4RunnerOptions o;
  o.n_threads = setup.model.n_threads;
  o.max_num_seqs = setup.engine.max_num_seqs;
  o.kv = setup.kv;
  o.verify_dense = setup.model.verify_paths;  // sparse vs dense CSA (deepseek4 has no MLA paths)
  auto rn = std::make_unique<Deepseek4Runner>(path, o);
  OpenedModel m;
  m.deepseek4 = rn.get();
  m.file = &rn->file();
  m.eos_ids = rn->eos_token_ids();
  const Deepseek4Config& c = rn->config();
  int n_csa = 0, n_hca = 0;
  for (int64_t il = 0; il < c.n_layer; ++il) {
    n_csa += c.attn_kind(il) == Ds4Attn::Csa;
    n_hca += c.attn_kind(il) == Ds4Attn::Hca;
  }
  m.summary = fmt::format(
      "deepseek4: {} layers ({} CSA, {} HCA, {} sliding; {} hash-routed), {} heads of {}, window {}, {} experts (top "
      "{}), vocab {}",
      c.n_layer, n_csa, n_hca, c.n_layer - n_csa - n_hca, c.n_hash_layers, c.n_head, c.head_dim, c.n_window, c.n_expert,
      c.n_expert_used, c.n_vocab);
  m.runner = std::move(rn);
  return m;
}

}  // namespace

OpenedModel open_model(const std::string& path, EngineSetup& setup, const EngineArgs& args, std::string_view command) {
  if (is_deepseek4_file(path)) {
    adapt_setup_for_deepseek4(setup, args, command);
    return open_deepseek4(path, setup);
  }
  std::unique_ptr<Deepseek2Runner> rn = open_runner(path, setup.policy, setup.model, setup.kv);
  OpenedModel m;
  if (!rn) return m;  // a worker rank under mpirun: rank 0 has finished
  m.deepseek2 = rn.get();
  m.file = &rn->file();
  m.eos_ids = rn->eos_token_ids();
  const DeepseekConfig& c = rn->config();
  m.summary = fmt::format("{} layers, {} heads, kv_lora_rank {}, {} experts (top {}), vocab {}", c.n_layer, c.n_head,
                          c.kv_lora_rank, c.n_expert, c.n_expert_used, c.n_vocab);
  m.runner = std::move(rn);
  return m;
}

}  // namespace mla::cli
