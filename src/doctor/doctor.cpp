// `mla doctor`: runs the checks (checks.h) in order and gives the verdict; the serve self-check.
#include "doctor/doctor.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "doctor/checks.h"
#include "engine/deepseek4_runner.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/log.h"

namespace mla {

std::string_view check_status_name(CheckStatus s) {
  switch (s) {
    case CheckStatus::Ok:
      return "ok";
    case CheckStatus::Warn:
      return "warn";
    case CheckStatus::Fail:
      return "FAIL";
    case CheckStatus::NotApplicable:
      return "n/a";
  }
  return "?";
}

const char* doctor_long_canary() {
  return "The quick brown fox jumps over the lazy dog. A function returns a value, and a class "
         "groups data with the methods that work on it.";
}

const char* doctor_english_text() {
  return "Python is a programming language that lets you work quickly and integrate systems more "
         "effectively. A program is a sequence of statements. Each statement is executed in order, "
         "from the top of the file to the bottom, unless a loop or a function call changes the flow. "
         "A variable is a name that refers to a value. Values have types: a number, a string of text, "
         "a list of other values, or a dictionary that maps keys to values. A function is defined with "
         "the def keyword, takes arguments, and returns a result. Modules group related functions and "
         "classes so that other programs can import and use them. The standard library provides many "
         "modules for common tasks, such as reading files, working with dates, and handling errors.";
}

namespace doctor {

void add_check(DoctorReport& r, std::string name, CheckStatus st, std::string detail) {
  r.checks.push_back({std::move(name), st, std::move(detail)});
}

PathComparison named(std::string name) {
  PathComparison p;
  p.name = std::move(name);
  return p;
}

}  // namespace doctor

namespace {

using doctor::add_check;
using doctor::PromptRun;

std::vector<int32_t> canary_ids(const Tokenizer* tok, const std::string& text, int64_t n_vocab) {
  std::vector<int32_t> ids;
  if (tok) {
    EncodeOptions eo;
    eo.add_special = true;
    for (TokenId t : tok->encode(text, eo)) ids.push_back(t);
  } else {  // no tokenizer: a fixed id sequence stands in for the text
    for (size_t i = 0; i < std::max<size_t>(text.size() / 4, 1); ++i)
      ids.push_back(static_cast<int32_t>((7 * i + 1) % n_vocab));
  }
  if (ids.empty()) fail("doctor: canary '{}' encodes to no tokens", text);
  return ids;
}

void set_canaries(const DoctorOptions& opt, const Tokenizer* tok, int64_t n_vocab, DoctorReport& r) {
  for (const auto& p : opt.prompts) {
    r.canary_texts.push_back(std::string(p.empty() ? doctor_long_canary() : p) +
                             (tok ? "" : " [no tokenizer in the file: fixed token ids stand in]"));
    r.canary_tokens.push_back(canary_ids(tok, p.empty() ? doctor_long_canary() : p, n_vocab));
  }
  if (r.canary_tokens.empty()) fail("doctor: no canary prompt");
}

// The verdict names every failed check; failing only on random-looking output is "untrained".
void finish_verdict(DoctorReport& r) {
  std::string failed;
  bool only_output_random = true;
  for (const auto& k : r.checks)
    if (k.status == CheckStatus::Fail) {
      failed += fmt::format("{}{}: {}", failed.empty() ? "" : "; ", k.name, k.detail);
      if (k.name != "output" || k.detail.rfind("random/untrained", 0) != 0) only_output_random = false;
    }
  if (failed.empty()) {
    r.verdict = "ok";
    r.verdict_line = "ok";
  } else if (only_output_random) {
    r.verdict = "untrained";
    r.verdict_line = "untrained: " + failed +
                     " (the checks of layout, paths and numerics pass: untrained weights, or weights wrong the same "
                     "way on every path)";
  } else {
    r.verdict = "FAIL";
    r.verdict_line = "FAIL: " + failed;
  }
}

bool is_deepseek4(const std::string& path) {
  try {
    return GgufFile::open(path, /*prefault=*/false)->opt_string("general.architecture") ==
           std::optional<std::string>("deepseek4");
  } catch (const Error&) {
    return false;  // the load check names the error
  }
}

// run_doctor for a deepseek4 file (doctor::deepseek4_checks).
void run_deepseek4_doctor(const std::string& path, const DoctorOptions& opt, DoctorReport& r) {
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<Deepseek4Runner> runner;
  try {
    runner = doctor::load_deepseek4_for_doctor(path, opt, r, tok);
  } catch (const Error& e) {
    add_check(r, "load", CheckStatus::Fail, e.what());
    return;
  }
  set_canaries(opt, tok.get(), runner->n_vocab(), r);
  doctor::deepseek4_checks(*runner, opt, r);
}

}  // namespace

DoctorReport run_doctor(const std::string& path, const DoctorOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  DoctorReport r;
  r.path = path;
  r.kv_dtype = ggml_type_name(opt.kv_dtype);
  if (is_deepseek4(path)) {
    run_deepseek4_doctor(path, opt, r);
    finish_verdict(r);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<Deepseek2Bundle> b;
  try {
    b = doctor::load_for_doctor(path, r, tok,
                                {.budget_bytes = opt.weights_memory, .max_batch_tokens = opt.max_num_batched_tokens});
  } catch (const Error& e) {
    add_check(r, "load", CheckStatus::Fail, e.what());
    finish_verdict(r);
    return r;
  }
  add_check(r, "load", CheckStatus::Ok, "config and every tensor's shape and type as expected");
  const DeepseekConfig& c = b->config;
  r.config_summary = describe_deepseek_config(c);
  doctor::keys_check(*b->file, c, r);
  set_canaries(opt, tok.get(), c.n_vocab, r);
  const std::vector<PromptRun> refs = doctor::path_checks(*b, opt, /*with_layout=*/true, opt.numerics, r);
  if (opt.numerics) doctor::numerics_checks(c, r);
  if (opt.scheduling) doctor::scheduling_section(*b, opt, r);
  if (opt.output) doctor::output_checks(c, *b, tok.get(), refs[0], opt, r);
  finish_verdict(r);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

DoctorReport run_path_self_check(const Deepseek2Bundle& b, const Tokenizer* tok, const DoctorOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  DoctorReport r;
  r.path = b.file->path();
  r.kv_dtype = ggml_type_name(opt.kv_dtype);
  set_canaries(opt, tok, b.config.n_vocab, r);
  doctor::path_checks(b, opt, false, false, r);
  finish_verdict(r);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

void apply_self_check(std::string_view mode, const DoctorReport& r) {
  if (mode == "off") return;
  if (r.ok()) {
    std::string agree = r.reference, unchecked, ran;
    for (const auto& p : r.paths) {
      if (p.status == CheckStatus::Ok) agree += ", " + p.name;
      if (p.status == CheckStatus::NotApplicable && (p.name == "mha" || p.name == "mqa"))
        unchecked += fmt::format("; {} not checked: {}", p.name, p.note);
      // What the auto runs actually ran, as their models counted it.
      if (p.name == "chunked prefill (3)")
        ran = fmt::format("; auto ran mqa {} / mha {} tokens", p.tokens_mqa, p.tokens_mha);
    }
    log().info("self-check: ok ({} agree on {} canaries{}{}; {:.2f} s)", agree, r.canary_tokens.size(), ran, unchecked,
               r.seconds);
  } else if (mode == "warn") {
    log().warn("self-check: {} (serving anyway: --self-check=warn)", r.verdict_line);
  } else {
    fail("self-check: {} (refusing to serve; --self-check=warn serves anyway)", r.verdict_line);
  }
}

}  // namespace mla
