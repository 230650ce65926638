// mla doctor MODEL [--prompt TEXT]... [--json]: whether a model file will produce garbage, and
// why (src/doctor/doctor.h). Exit status 0 when the verdict is ok, 1 otherwise (a file that does
// not load included), so scripts can gate on it.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/engine_args.h"
#include "doctor/doctor.h"
#include "kv/latent_cache.h"
#include "util/error.h"

namespace mla::cli {
namespace {

struct DoctorArgs {
  std::string model;
  std::vector<std::string> prompts;
  bool json = false;
  EngineArgs engine;  // -t, --kv-cache-dtype, --max-num-batched-tokens
  int n_greedy = 8;
  std::string layout_max_bytes = "4G";
  bool no_layout = false;
  CommonOptions common;
};

void run_doctor_cmd(const DoctorArgs& a) {
  apply_common_options(a.common);
  DoctorOptions o;
  if (!a.prompts.empty()) o.prompts = a.prompts;
  for (const auto& p : a.prompts)
    if (p.empty()) fail("doctor: --prompt must not be empty");
  if (a.n_greedy < 1) fail("doctor: --n-greedy must be >= 1, got {}", a.n_greedy);
  o.n_greedy = a.n_greedy;
  if (a.engine.max_num_batched_tokens < 1)
    fail("doctor: --max-num-batched-tokens must be >= 1, got {}", a.engine.max_num_batched_tokens);
  const EngineSetup setup = build_engine_setup(a.engine, a.common, "doctor");
  o.n_threads = setup.model.n_threads;
  o.kv_dtype = setup.kv.dtype;
  o.exact_attention = setup.model.exact_attention;
  o.weights_memory = setup.model.weights_memory;
  o.max_num_batched_tokens = setup.engine.max_num_batched_tokens;
  o.layout_max_bytes = parse_byte_size(a.layout_max_bytes, "--layout-max-bytes");
  o.layout = !a.no_layout;
  const DoctorReport r = run_doctor(a.model, o);
  if (a.json)
    fmt::print("{}\n", doctor_report_json(r).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  else
    fmt::print("{}", format_doctor_report(r));
  exit_code() = r.ok() ? 0 : 1;
}

}  // namespace

void register_doctor(CLI::App& app) {
  auto* cmd = app.add_subcommand("doctor", "Check whether a model file will produce garbage, and why");
  static DoctorArgs a;
  cmd->add_option("model", a.model, "GGUF file")->required();
  cmd->add_option("--prompt", a.prompts,
                  "Canary prompt (repeatable; default: \"Hello\" and a built-in longer sentence)");
  cmd->add_flag("--json", a.json, "Print the report as one JSON object");
  // The path checks run the exact kernels unless told otherwise: under them the paths give the same
  // bits, so any difference is a wrong path, whatever precision the server uses.
  a.engine.attention_precision = "exact";
  // The doctor maps the file on demand (no prefault) and runs its own path policies.
  add_engine_args(cmd, a.engine,
                  {.mla_path = false, .speculative_config = false, .prefault = false, .capacity = false});
  cmd->get_option("--kv-cache-dtype")->description("Latent cache dtype the checks run with: f16 | f32 | bf16 | q8_0");
  cmd->get_option("--max-num-batched-tokens")
      ->description("Scheduler token budget for the scheduling section (as mla serve)");
  cmd->add_option("--n-greedy", a.n_greedy, "Greedy tokens per canary")->capture_default_str();
  cmd->add_option("--layout-max-bytes", a.layout_max_bytes,
                  "Largest file converted (into a temporary copy) to the other MLA layout for the layout comparison")
      ->capture_default_str();
  cmd->add_flag("--no-layout", a.no_layout, "Skip the split/fused layout comparison");
  add_common_options(cmd, a.common);
  cmd->callback([] { run_doctor_cmd(a); });
}

}  // namespace mla::cli
