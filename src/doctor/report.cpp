// The doctor's report as text (short, readable, in the order a user reads it) and as JSON.
#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "doctor/doctor.h"

namespace mla {
namespace {

// Text of a token for one line: control characters escaped.
std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char ch : s) {
    if (ch == '\n')
      out += "\\n";
    else if (ch == '\t')
      out += "\\t";
    else if (ch < 0x20)
      out += fmt::format("\\x{:02x}", ch);
    else
      out += static_cast<char>(ch);
  }
  return out;
}

std::string num(double v) { return std::isfinite(v) ? fmt::format("{:.3g}", v) : std::string("inf"); }

const DoctorCheck* find_check(const DoctorReport& r, std::string_view name) {
  for (const auto& c : r.checks)
    if (c.name == name) return &c;
  return nullptr;
}

// The text report, a line at a time; check(name) adds that check's line when the report has it.
struct ReportText {
  const DoctorReport& r;
  std::string s;
  void line(const std::string& t) { s += t + "\n"; }
  void check(std::string_view name) {
    if (const DoctorCheck* c = find_check(r, name))
      line(fmt::format("  check {:<9} {:<4} {}", c->name, check_status_name(c->status), c->detail));
  }
};

void file_section(ReportText& t) {
  const DoctorReport& r = t.r;
  t.line("File");
  t.line(fmt::format("  architecture  {}", r.architecture.empty() ? "?" : r.architecture));
  t.line(fmt::format("  shards        {}", r.shards));
  if (!r.mla_layout.empty()) t.line(fmt::format("  MLA layout    {}", r.mla_layout));
  t.line(fmt::format("  indexer       {}", r.indexer));
  t.line(fmt::format("  MTP           {}", r.mtp));
  if (!r.types.empty()) {
    t.line("  tensor types by role:");
    for (const auto& ty : r.types)
      t.line(fmt::format("    {:<15} {:<6} {:>4} tensors {:>10.2f} MiB", ty.role, ty.type, ty.n_tensors,
                         ty.n_bytes / 1048576.0));
  }
  if (!r.absent_keys.empty()) {
    t.line("  absent keys (default taken):");
    for (const auto& k : r.absent_keys) t.line(fmt::format("    {} = {}", k.key, k.default_taken));
  }
  t.check("load");
  t.check("layout");  // deepseek4
  t.check("keys");
}

void numerics_section(ReportText& t) {
  const DoctorReport& r = t.r;
  if (r.numerics.empty()) return;
  t.line("");
  t.line(fmt::format("Numerics of the absorbed path (canaries, {} latent cache)", r.kv_dtype));
  t.line("  layer   max|q·W_UK|  max|attn·W_UV|  max|latent|  score err F16  score err BF16  cache rel err");
  for (const auto& n : r.numerics)
    t.line(fmt::format("  blk.{:<3} {:>11}  {:>14}  {:>11}  {:>13}  {:>14}  {:>13}", n.layer, num(n.max_q_absorbed),
                       num(n.max_attn_out), num(n.max_latent), num(n.score_err_f16), num(n.score_err_bf16),
                       num(n.cache_rel_err)));
  t.check("heads");
  t.check("overflow");
  t.check("bf16");
  t.check("cache");
}

void paths_section(ReportText& t) {
  const DoctorReport& r = t.r;
  t.line("");
  if (r.architecture == "deepseek4")
    t.line("Agreement with the whole prefill (every position's logits)");
  else
    t.line(fmt::format("Path agreement (reference: {}, whole prompt; the others teacher-forced on its greedy tokens)",
                       r.reference));
  for (size_t i = 0; i < r.canary_texts.size(); ++i)
    t.line(
        fmt::format("  canary {}: \"{}\" ({} tokens)", i + 1, printable(r.canary_texts[i]), r.canary_tokens[i].size()));
  for (const auto& p : r.paths) {
    if (p.status == CheckStatus::NotApplicable) {
      t.line(fmt::format("  {:<22} n/a   {}", p.name, p.note));
      continue;
    }
    const std::string note = p.note.empty() ? "" : "  (" + p.note + ")";
    if (r.architecture == "deepseek4") {  // no layers, no MLA paths
      t.line(fmt::format("  {:<22} {:<4}  logits {:.1e}{}", p.name, check_status_name(p.status), p.logits_rel, note));
      continue;
    }
    std::string layers;
    for (size_t l = 0; l < p.layer_rel.size(); ++l) layers += (l ? " " : "") + fmt::format("{:.1e}", p.layer_rel[l]);
    t.line(fmt::format("  {:<22} {:<4}  logits {:.1e}  greedy {}  layers [{}]  ran mqa {} / mha {} tokens{}", p.name,
                       check_status_name(p.status), p.logits_rel, p.greedy_agree ? "same" : "DIFFER", layers,
                       p.tokens_mqa, p.tokens_mha, note));
  }
  t.check("finite");  // deepseek4
  t.check("paths");
  t.check("sparse");    // deepseek4
  t.check("absorbed");  // deepseek4
}

void output_section(ReportText& t) {
  const DoctorReport& r = t.r;
  if (!find_check(r, "output")) return;
  t.line("");
  t.line("Output");
  std::string toks;
  for (const auto& g : r.greedy)
    toks += fmt::format("{}[{} \"{}\" p={:.2f}]", toks.empty() ? "" : " ", g.id, printable(g.text), g.prob);
  t.line(fmt::format("  greedy after canary 1: {}", toks));
  t.line(fmt::format("  first distribution entropy {:.2f} nats (uniform: {:.2f})", r.first_entropy, r.max_entropy));
  if (r.ppl > 0)
    t.line(fmt::format("  perplexity of the built-in English text: {:.4g} over {} tokens (vocabulary {})", r.ppl,
                       r.ppl_tokens, r.n_vocab));
  t.check("output");
}

}  // namespace

std::string format_doctor_report(const DoctorReport& r) {
  ReportText t{r, {}};
  t.line(fmt::format("mla doctor: {}", r.path));
  t.line("");
  file_section(t);
  if (const DoctorCheck* c = find_check(r, "load"); c && c->status == CheckStatus::Fail) {
    t.line("");
    t.line("verdict: " + r.verdict_line);
    return t.s;
  }
  numerics_section(t);
  paths_section(t);
  if (!r.dispatch.empty()) {
    t.line("");
    t.line("Scheduling (the engine's scheduler over the real forward, policy auto: the paths the model took)");
    for (const auto& d : r.dispatch) t.line("  " + d);
  }
  output_section(t);
  t.line("");
  t.line(fmt::format("verdict: {}", r.verdict_line));
  return t.s;
}

nlohmann::json doctor_report_json(const DoctorReport& r) {
  using nlohmann::json;
  json j;
  j["path"] = r.path;
  json file;
  file["architecture"] = r.architecture;
  file["shards"] = r.shards;
  file["mla_layout"] = r.mla_layout;
  file["indexer"] = r.indexer;
  file["mtp"] = r.mtp;
  file["types"] = json::array();
  for (const auto& t : r.types)
    file["types"].push_back({{"role", t.role}, {"type", t.type}, {"n_tensors", t.n_tensors}, {"n_bytes", t.n_bytes}});
  file["absent_keys"] = json::array();
  for (const auto& k : r.absent_keys) file["absent_keys"].push_back({{"key", k.key}, {"default", k.default_taken}});
  j["file"] = file;
  auto finite = [](double v) { return std::isfinite(v) ? json(v) : json("inf"); };
  j["numerics"] = json::array();
  for (const auto& n : r.numerics)
    j["numerics"].push_back({{"layer", n.layer},
                             {"max_q_absorbed", finite(n.max_q_absorbed)},
                             {"max_attn_out", finite(n.max_attn_out)},
                             {"max_latent", finite(n.max_latent)},
                             {"score_err_f16", finite(n.score_err_f16)},
                             {"score_err_bf16", finite(n.score_err_bf16)},
                             {"cache_rel_err", finite(n.cache_rel_err)}});
  j["kv_dtype"] = r.kv_dtype;
  j["canaries"] = json::array();
  for (size_t i = 0; i < r.canary_texts.size(); ++i)
    j["canaries"].push_back({{"text", r.canary_texts[i]}, {"tokens", r.canary_tokens[i]}});
  j["path_reference"] = r.reference;
  j["paths"] = json::array();
  for (const auto& p : r.paths) {
    json layers = json::array();
    for (double v : p.layer_rel) layers.push_back(finite(v));
    j["paths"].push_back({{"name", p.name},
                          {"status", check_status_name(p.status)},
                          {"note", p.note},
                          {"layer_rel", layers},
                          {"logits_rel", finite(p.logits_rel)},
                          {"greedy_agree", p.greedy_agree},
                          {"tokens_mha", p.tokens_mha},
                          {"tokens_mqa", p.tokens_mqa}});
  }
  j["dispatch"] = r.dispatch;
  json out;
  out["greedy"] = json::array();
  for (const auto& g : r.greedy) out["greedy"].push_back({{"id", g.id}, {"text", g.text}, {"prob", g.prob}});
  out["first_entropy"] = r.first_entropy;
  out["max_entropy"] = r.max_entropy;
  out["ppl"] = finite(r.ppl);
  out["ppl_tokens"] = r.ppl_tokens;
  out["n_vocab"] = r.n_vocab;
  j["output"] = out;
  j["checks"] = json::array();
  for (const auto& c : r.checks)
    j["checks"].push_back({{"name", c.name}, {"status", check_status_name(c.status)}, {"detail", c.detail}});
  json failed = json::array();
  for (const auto& c : r.checks)
    if (c.status == CheckStatus::Fail) failed.push_back(c.name);
  j["verdict"] = {{"status", r.verdict}, {"failed", failed}, {"line", r.verdict_line}};
  j["seconds"] = r.seconds;
  return j;
}

}  // namespace mla
