#pragma once
// The checks of `mla doctor` (internal to src/doctor/), one file each: the file (file_checks.cpp),
// the other MLA layout (layout_variant.cpp), the path agreement (path_checks.cpp), numerics and
// output (numerics_checks.cpp), the scheduler's dispatch (scheduling.cpp), a deepseek4 file's own
// set (deepseek4_checks.cpp); doctor.cpp runs them
// and gives the verdict. Each appends to the report: its facts and one DoctorCheck line or more.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "doctor/doctor.h"
#include "doctor/runs.h"
#include "model/deepseek2.h"

namespace mla {
class GgufFile;
class Tokenizer;
class Deepseek4Runner;
}  // namespace mla

namespace mla::doctor {

void add_check(DoctorReport& r, std::string name, CheckStatus st, std::string detail);
PathComparison named(std::string name);

// File facts that need only the parsed GGUF (reported even when the config or weights fail).
void describe_file(const GgufFile& f, DoctorReport& r);
// Silent defaults that change the math: a key the loader defaulted while its neighbours say the
// file meant something else. One "keys" check.
void keys_check(const GgufFile& f, const DeepseekConfig& c, DoctorReport& r);
// Opens the file (describe_file first, so a later failure keeps the file facts), loads config and
// weights; tok stays null when the file has no usable tokenizer. expert_cache.budget_bytes > 0:
// the routed experts stream through an expert cache (--weights-memory). Throws mla::Error.
std::unique_ptr<Deepseek2Bundle> load_for_doctor(const std::string& path, DoctorReport& r,
                                                 std::unique_ptr<Tokenizer>& tok,
                                                 const ExpertCacheOptions& expert_cache = {});

// The canaries through the other MLA layout (a converted temporary copy), MHA and MQA, against
// the reference runs refs; n/a when opt says so or the copy would be too large.
void run_layout_variant(const std::string& path, const DeepseekWeights& w,
                        const std::vector<std::vector<int32_t>>& canaries, const std::vector<PromptRun>& refs,
                        const DoctorOptions& opt, DoctorReport& r);

// The canaries through every path against the reference (MHA where its W_UK form is loaded), the
// other layout when with_layout, dense vs sparse where the model has an indexer; the numerics
// probe and head check when with_numerics. One "paths" check; returns the reference runs.
std::vector<PromptRun> path_checks(const Deepseek2Bundle& b, const DoctorOptions& opt, bool with_layout,
                                   bool with_numerics, DoctorReport& r);

// The "overflow", "bf16" and "cache" checks on r.numerics.
void numerics_checks(const DeepseekConfig& c, DoctorReport& r);
// The "output" check: greedy tokens and entropy of the reference run, perplexity of the built-in
// English text (with a tokenizer).
void output_checks(const DeepseekConfig& c, const Deepseek2Bundle& b, const Tokenizer* tok, const PromptRun& ref,
                   const DoctorOptions& opt, DoctorReport& r);

// How the engine's scheduler dispatches each canary: r.dispatch, a block of lines per canary.
void scheduling_section(const Deepseek2Bundle& b, const DoctorOptions& opt, DoctorReport& r);

// deepseek4 (deepseek4_checks.cpp). Opens the file (describe_file first), loads it once into the
// Deepseek4Runner the checks drive (weights repacked as `mla serve` runs them; max_num_seqs: one
// per canary), the tokenizer when usable; adds the "load" and "layout" checks (the schedule, the
// tensors nothing reads). Throws mla::Error naming what did not load.
std::unique_ptr<Deepseek4Runner> load_deepseek4_for_doctor(const std::string& path, const DoctorOptions& opt,
                                                           DoctorReport& r, std::unique_ptr<Tokenizer>& tok);
// The "finite", "paths" (chunked prefill, decode, the runner's batched steps against the whole
// prefill), "sparse" (CSA through the indexer vs every entry, where top-k keeps them all) and
// "absorbed" (n/a: one shared K=V head) checks on r.canary_tokens, over the runner's weights.
void deepseek4_checks(Deepseek4Runner& runner, const DoctorOptions& opt, DoctorReport& r);

}  // namespace mla::doctor
