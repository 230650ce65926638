#pragma once
// The model `mla run`, `mla serve` and `mla bench` drive, by the file's general.architecture: the
// deepseek2 family (deepseek2, deepseek32, glm-dsa: Deepseek2Runner, or the distributed runner
// under mpirun) or DeepSeek-V4 (deepseek4: Deepseek4Runner). For deepseek4 the engine setup is
// adapted first: options it cannot honour are refused by name, prefix caching is turned off with a
// line saying why.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cli/engine_args.h"
#include "engine/model_runner.h"

namespace mla {
class Deepseek2Runner;
class Deepseek4Runner;
class GgufFile;
}  // namespace mla

namespace mla::cli {

// general.architecture == "deepseek4"; false for a file that does not open (the caller's open
// names that error).
bool is_deepseek4_file(const std::string& path);

struct OpenedModel {
  std::unique_ptr<ModelRunner> runner;   // null on an mpirun worker rank whose rank 0 has finished
  Deepseek2Runner* deepseek2 = nullptr;  // the same runner when it is the deepseek2 family's
  Deepseek4Runner* deepseek4 = nullptr;  // or deepseek4's (both stay valid inside an Engine)
  const GgufFile* file = nullptr;
  std::vector<int32_t> eos_ids;
  std::string summary;  // "61 layers, 128 heads, ..., vocab 129280"
};

// Opens the model for `command` ("run", "serve", "bench") with the setup build_engine_setup made
// from args; adapts setup for deepseek4 (see above). Throws mla::Error naming what was refused.
OpenedModel open_model(const std::string& path, EngineSetup& setup, const EngineArgs& args, std::string_view command);

// The deepseek4 checks alone: refuses --speculative-config, the MTP layer (--mtp-logits),
// --weights-memory, mpirun, --mla-path other than auto, --attention-precision
// exact, --dsa off and the kv cache tiers, each by name; turns prefix caching off (logged).
// (--verify-paths is taken: the runner reruns each chunk with dense CSA, Deepseek4RunnerOptions.)
void adapt_setup_for_deepseek4(EngineSetup& setup, const EngineArgs& args, std::string_view command);

}  // namespace mla::cli
