// The file check of `mla doctor`: what the GGUF holds, by role and type, and the keys whose
// absence silently changes the math.
#include <fmt/format.h>

#include <map>

#include "doctor/checks.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/log.h"

namespace mla::doctor {

namespace {

std::string tensor_role(const std::string& n) {
  if (n == "token_embd.weight" || n == "output.weight") return "embeddings";
  if (n.find(".nextn.") != std::string::npos) return "mtp";
  if (n.find("indexer") != std::string::npos) return "indexer";
  // deepseek4: hyper-connections (blk.N.hc_attn_*, output_hc_* or hc_head_*), the hash routing table
  if (n.find(".hc_") != std::string::npos || n.rfind("output_hc_", 0) == 0 || n.rfind("hc_head_", 0) == 0)
    return "hyper-conn";
  if (n.find("tid2eid") != std::string::npos) return "router";
  if (n.find("norm") != std::string::npos) return "norms";
  if (n.find("_exps") != std::string::npos) return "experts";
  if (n.find("_shexp") != std::string::npos) return "shared experts";
  if (n.find("ffn_gate_inp") != std::string::npos || n.find("exp_probs_b") != std::string::npos) return "router";
  if (n.find(".attn_") != std::string::npos) return "attention";
  if (n.find(".ffn_") != std::string::npos) return "dense ffn";
  return "other";
}

}  // namespace

void describe_file(const GgufFile& f, DoctorReport& r) {
  if (auto a = f.opt_string("general.architecture")) r.architecture = *a;
  if (auto n = f.opt_int("split.count"); n && *n > 1) r.shards = fmt::format("{} (split.count)", *n);
  std::map<std::pair<std::string, std::string>, TensorTypeCount> by_role;
  int64_t n_indexer = 0, n_mtp = 0;
  for (const auto& t : f.tensors()) {
    const std::string role = tensor_role(t.name);
    auto& e = by_role[{role, std::string(ggml_type_name(t.type))}];
    e.role = role;
    e.type = ggml_type_name(t.type);
    e.n_tensors++;
    e.n_bytes += static_cast<int64_t>(t.n_bytes);
    n_indexer += role == "indexer";
    n_mtp += role == "mtp";
  }
  for (auto& [k, v] : by_role) r.types.push_back(v);
  const bool split = f.find_tensor("blk.0.attn_k_b.weight") || f.find_tensor("blk.0.attn_v_b.weight");
  const bool fused = f.find_tensor("blk.0.attn_kv_b.weight") != nullptr;
  r.mla_layout = split && fused ? "split (attn_k_b + attn_v_b; the attn_kv_b ik_llama.cpp also writes is not read)"
                 : split        ? "split (attn_k_b + attn_v_b)"
                 : fused        ? "fused (attn_kv_b)"
                                : "none found in blk.0";
  if (n_indexer > 0) r.indexer = fmt::format("present ({} tensors)", n_indexer);
  const auto nextn = f.opt_int(r.architecture + ".nextn_predict_layers");
  if (n_mtp > 0 || (nextn && *nextn > 0))
    r.mtp = fmt::format("present ({} nextn layer(s), {} tensors)", nextn.value_or(0), n_mtp);
}

void keys_check(const GgufFile& f, const DeepseekConfig& c, DoctorReport& r) {
  for (const auto& k : deepseek_config_key_states(f, c))
    if (!k.present) r.absent_keys.push_back({k.key, k.value.empty() ? "\"\"" : k.value});
  const std::string prefix = std::string(model_arch_name(c.arch)) + ".";
  const std::string rs = prefix + "rope.scaling.";
  std::vector<std::string> fails, warns;
  std::string orphans;
  for (const char* sub :
       {"factor", "original_context_length", "yarn_log_multiplier", "yarn_beta_fast", "yarn_beta_slow"})
    if (f.has(rs + sub)) orphans += (orphans.empty() ? "" : ", ") + std::string(sub);
  const std::string& type = c.rope_scaling_type;
  if (!f.has(rs + "type") && !orphans.empty())
    fails.push_back(
        fmt::format("{}type is absent (default: none) but {} {} present: that RoPE scaling is not "
                    "applied",
                    rs, orphans, orphans.find(',') == std::string::npos ? "is" : "are"));
  if ((type == "yarn" || type == "linear") && !f.has(rs + "factor"))
    fails.push_back(fmt::format("{}factor is absent (default 1): the '{}' scaling is a no-op", rs, type));
  if (type == "yarn" && !f.has(rs + "original_context_length"))
    warns.push_back(fmt::format("{}original_context_length absent: took context_length {}", rs, c.n_ctx_train));
  if (type == "yarn" && !f.has(rs + "yarn_log_multiplier"))
    warns.push_back(fmt::format("{}yarn_log_multiplier absent: no YaRN mscale in the attention scale", rs));
  const bool has_bias = f.find_tensor(fmt::format("blk.{}.exp_probs_b.bias", c.n_layer_dense_lead)) != nullptr;
  if (has_bias && !f.has(prefix + "expert_gating_func"))
    warns.push_back("expert_gating_func absent (default softmax) in a file with exp_probs_b (V3 style, sigmoid)");
  if (!fails.empty()) {
    std::string d = fails[0];
    for (size_t i = 1; i < fails.size(); ++i) d += "; " + fails[i];
    add_check(r, "keys", CheckStatus::Fail, d);
  } else if (!warns.empty()) {
    std::string d = warns[0];
    for (size_t i = 1; i < warns.size(); ++i) d += "; " + warns[i];
    add_check(r, "keys", CheckStatus::Warn, d);
  } else {
    add_check(r, "keys", CheckStatus::Ok,
              fmt::format("{} optional key(s) absent, none of them contradicted by the file", r.absent_keys.size()));
  }
}

std::unique_ptr<Deepseek2Bundle> load_for_doctor(const std::string& path, DoctorReport& r,
                                                 std::unique_ptr<Tokenizer>& tok,
                                                 const ExpertCacheOptions& expert_cache) {
  auto b = std::make_unique<Deepseek2Bundle>();
  b->file = GgufFile::open(path);
  describe_file(*b->file, r);
  b->config = load_deepseek_config(*b->file);
  WeightLoadOptions wo = weight_options_for(MlaPathPolicy::Auto, true);
  wo.expert_cache = expert_cache;
  b->weights = bind_deepseek_weights(*b->file, b->config, wo);
  try {
    tok = Tokenizer::from_gguf(*b->file);
  } catch (const Error& e) {
    log().warn("doctor: no usable tokenizer ({}); canaries become fixed token ids", e.what());
  }
  return b;
}

}  // namespace mla::doctor
