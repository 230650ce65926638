// mla doctor MODEL [--prompt TEXT]... [--json]: whether a model file will produce garbage, and
// why (src/doctor/doctor.h). Exit status 0 when the verdict is ok, 1 otherwise (a file that does
// not load included), so scripts can gate on it.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "cli/commands.h"
#include "cli/common.h"
#include "doctor/doctor.h"
#include "gguf/types.h"
#include "util/error.h"

namespace mla::cli {
namespace {

struct DoctorArgs {
  std::string model;
  std::vector<std::string> prompts;
  bool json = false;
  int threads = 0;
  std::string kv_dtype = "f16";
  int n_greedy = 8;
  int max_num_batched_tokens = 2048;
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
  o.n_threads = a.threads > 0 ? a.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto kv = ggml_type_from_name(a.kv_dtype);
  if (!kv) fail("doctor: --kv-cache-dtype '{}' is not a type name (f16, bf16, f32, q8_0)", a.kv_dtype);
  o.kv_dtype = *kv;
  if (a.n_greedy < 1) fail("doctor: --n-greedy must be >= 1, got {}", a.n_greedy);
  o.n_greedy = a.n_greedy;
  if (a.max_num_batched_tokens < 1)
    fail("doctor: --max-num-batched-tokens must be >= 1, got {}", a.max_num_batched_tokens);
  o.max_num_batched_tokens = a.max_num_batched_tokens;
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
  cmd->add_option("-t,--threads", a.threads, "Threads (default: all hardware threads)");
  cmd->add_option("--kv-cache-dtype", a.kv_dtype, "Latent cache type the checks run with: f16 | bf16 | f32 | q8_0")
      ->capture_default_str();
  cmd->add_option("--n-greedy", a.n_greedy, "Greedy tokens per canary")->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", a.max_num_batched_tokens,
                  "Scheduler token budget for the scheduling section (as mla serve)")
      ->capture_default_str();
  cmd->add_option("--layout-max-bytes", a.layout_max_bytes,
                  "Largest file converted (into a temporary copy) to the other MLA layout for the layout comparison")
      ->capture_default_str();
  cmd->add_flag("--no-layout", a.no_layout, "Skip the split/fused layout comparison");
  add_common_options(cmd, a.common);
  cmd->callback([] { run_doctor_cmd(a); });
}

}  // namespace mla::cli
