#pragma once
// `mla doctor`: whether a model file will produce garbage, and why. Built from what the engine
// already has (the loader, both MLA paths, the layout converter, the scheduler, the forward's
// observation hook), not a second engine:
//   file        architecture, shards, tensor types by role, MLA layout, absent keys and the
//               defaults taken, indexer / MTP presence; rules for silent defaults that change
//               the math (keys check)
//   numerics    per layer, the largest absorbed products (q·W_UK, attention·W_UV) and latent
//               values on the canary, against the F16 range; the absorbed scores' error if
//               computed in F16 / BF16; the latent cache dtype's round-trip error
//   paths       the canaries through MHA, MQA, 1-token and chunked prefill, the other MLA
//               layout (dense vs sparse once an indexer exists): per-layer and final-logit
//               relative differences and greedy agreement, against MHA as the reference
//   scheduling  how the engine's scheduler dispatches each canary (steps, query lengths, path)
//   output      greedy tokens with probabilities, first-distribution entropy, perplexity of a
//               built-in English text; near-uniform / repeating / perplexity near the
//               vocabulary size are flagged
// A deepseek4 file gets its own set (there are no MLA paths): file, layout (the schedule's
// tensors bound), finite logits, chunked prefill / decode / the runner's batched steps against the
// whole prefill, sparse (indexer top-k) vs dense CSA where top-k keeps every entry.
// Each check ends ok / warn / fail / n/a; the verdict names every failed check.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "util/ggml_type.h"

namespace mla {

struct Deepseek2Bundle;
struct DeepseekWeights;
class Tokenizer;

enum class CheckStatus { Ok, Warn, Fail, NotApplicable };
std::string_view check_status_name(CheckStatus s);  // "ok" | "warn" | "FAIL" | "n/a"

struct DoctorCheck {
  std::string name;  // "load", "keys", "overflow", "bf16", "cache", "paths", "output"
  CheckStatus status = CheckStatus::Ok;
  std::string detail;  // one line: what was measured against what
};

struct DoctorOptions {
  std::vector<std::string> prompts = {"Hello", ""};  // canaries; "" → the built-in longer prompt
  int n_threads = 1;
  GgmlType kv_dtype = GgmlType::F16;            // the latent cache type the checks run with (serve's default)
  int n_greedy = 8;                             // greedy tokens per canary (teacher-forced in the other runs)
  int max_num_batched_tokens = 2048;            // the scheduler budget for the scheduling section
  int64_t layout_max_bytes = int64_t{4} << 30;  // larger files skip the other-layout comparison
  bool layout = true;                           // compare against the other MLA layout (a converted temporary copy)
  bool numerics = true, output = true, scheduling = true;
  // The attention kernels the checks run (--attention-precision): exact by default, under which the
  // paths give the same bits, so any difference is a real one.
  bool exact_attention = true;
  int64_t weights_memory = 0;  // --weights-memory: > 0 streams the routed experts through a cache of this budget
  // Tolerances of the path agreement (relative: max |a - b| / max |a|) with the exact attention
  // kernels; with the F32 kernels the doctor widens them to what their last-bit differences can
  // grow to (doctor.cpp, path_tolerances).
  double tol_layer = 1e-4;   // a layer's attention output
  double tol_logits = 1e-4;  // the logits after the prompt and at each greedy step
  // deepseek4: the length of the sparse-vs-dense prompt; 0: the longest at which no CSA query sees
  // more than indexer_top_k entries (at most 256 tokens). Longer makes the indexer drop entries, so
  // the check can fail (tests).
  int64_t ds4_sparse_tokens = 0;
};

// deepseek4: how far CSA through the indexer may differ from CSA over every entry (relative, the
// logits) where top-k keeps every entry (the doctor's "sparse" check, `mla run --verify-paths`).
inline constexpr double kDoctorSparseDenseTol = 1e-4;

struct TensorTypeCount {
  std::string role;  // attention, experts, shared experts, dense ffn, router, embeddings, norms, other
  std::string type;
  int64_t n_tensors = 0;
  int64_t n_bytes = 0;
};

struct AbsentKey {
  std::string key;
  std::string default_taken;
};

struct LayerNumerics {
  int64_t layer = 0;
  double max_q_absorbed = 0;  // max |W_UK_hᵀ · q_nope_h| (the MQA query in latent space)
  double max_attn_out = 0;    // max |attention · W_UV|
  double max_latent = 0;      // max |c_kv|, |k_pe| (the cache rows)
  double score_err_f16 = 0;   // max |score(f32) - score(f16 inputs)| · kq_scale; inf on overflow
  double score_err_bf16 = 0;  // the same with bf16 inputs
  double cache_rel_err = 0;   // max |row - cache round trip| / max |row|
};

struct PathComparison {
  std::string name;  // "mqa", "1-token prefill", "chunked prefill (3)", "fused layout, mha", ...
  CheckStatus status = CheckStatus::Ok;
  std::string note;               // why n/a, or what disagreed
  std::vector<double> layer_rel;  // per layer, the largest over the canaries
  double logits_rel = 0;          // largest over the canaries and greedy steps
  bool greedy_agree = true;       // the reference's greedy tokens are this run's argmax too (or near ties)
  // The tokens this run's model sent down each MLA path (its PathCounters), over the canaries.
  int64_t tokens_mha = 0, tokens_mqa = 0;
};

struct GreedyToken {
  int32_t id = 0;
  std::string text;
  double prob = 0;
};

struct DoctorReport {
  std::string path;
  // File.
  std::string architecture;
  std::string shards = "1 (single file)";
  std::string mla_layout;  // "split (attn_k_b + attn_v_b)" | "fused (attn_kv_b)"
  std::string indexer = "n/a (no indexer tensors: dense MLA)";
  std::string mtp = "absent";
  std::string config_summary;  // describe_deepseek_config
  std::vector<TensorTypeCount> types;
  std::vector<AbsentKey> absent_keys;
  // Canaries as tokenized.
  std::vector<std::vector<int32_t>> canary_tokens;
  std::vector<std::string> canary_texts;
  // Numerics (first canary, reference run).
  std::vector<LayerNumerics> numerics;
  std::string kv_dtype;
  std::string head_pairing;  // the W_UK head-order finding (empty when not run)
  // Paths.
  std::string reference = "mha";  // the run the others are compared with (mqa where only its W_UK form is loaded)
  std::vector<PathComparison> paths;
  // Scheduling: one block of lines per canary.
  std::vector<std::string> dispatch;
  // Output.
  std::vector<GreedyToken> greedy;            // first canary
  double first_entropy = 0, max_entropy = 0;  // nats; max = ln(n_vocab)
  double ppl = 0;
  int64_t ppl_tokens = 0;
  int64_t n_vocab = 0;
  // Checks and verdict.
  std::vector<DoctorCheck> checks;
  std::string verdict;       // "ok" | "untrained" | "FAIL"
  std::string verdict_line;  // "ok" or "FAIL: keys (...); output (...)"
  double seconds = 0;

  bool ok() const { return verdict == "ok"; }
};

// Runs every enabled section on the GGUF at path. A file that does not load gives a report with
// the load check failed (never throws for a bad model file).
DoctorReport run_doctor(const std::string& path, const DoctorOptions& opt);

// The path-agreement part only (what `mla serve --self-check` runs before /health turns 200), on
// weights already loaded (serve passes its runner's: the file is not loaded or repacked again):
// the canaries through MHA, MQA, 1-token and chunked prefill. With W_UK in one form only (an
// engine serving a forced --mla-path), that path is the reference, the other is n/a, and the
// 1-token and chunked prefill run under it. tok may be nullptr (fixed token ids stand in for the
// canary texts).
DoctorReport run_path_self_check(const Deepseek2Bundle& b, const Tokenizer* tok, const DoctorOptions& opt);

// The tolerances the path check holds each layer's attention output and the logits to (relative).
// With the exact attention kernels (the default; the paths give the same bits) opt.tol_layer and
// opt.tol_logits; with opt.exact_attention false the F32 kernels' last-bit differences can flip a
// rounding downstream, so at least four steps of the coarsest rounding the forward applies (the
// latent cache type opt.kv_dtype, or a matmul's quantized activations) and 1e-2 on the logits.
// `mla run --verify-paths` uses them too.
struct PathTolerances {
  double layer, logits;
};
PathTolerances path_tolerances(const DeepseekWeights& w, const DoctorOptions& opt);

// `mla serve --self-check=MODE` on a self-check report: "off" or an ok report → nothing thrown;
// "warn" → logs a warning; "on" → throws mla::Error with one line naming what disagreed.
void apply_self_check(std::string_view mode, const DoctorReport& r);

std::string format_doctor_report(const DoctorReport& r);
nlohmann::json doctor_report_json(const DoctorReport& r);

// The built-in texts: a longer canary prompt and a short English passage for the perplexity.
const char* doctor_long_canary();
const char* doctor_english_text();

}  // namespace mla
