#include "model/batch.h"

#include "util/error.h"

namespace mla {

std::string_view mla_path_policy_name(MlaPathPolicy p) {
  switch (p) {
    case MlaPathPolicy::Auto:
      return "auto";
    case MlaPathPolicy::Mha:
      return "mha";
    case MlaPathPolicy::Mqa:
      return "mqa";
  }
  return "?";
}

std::string_view mla_path_name(MlaPath p) { return p == MlaPath::Mha ? "mha" : "mqa"; }

MlaPathPolicy parse_mla_path_policy(std::string_view s) {
  if (s == "auto") return MlaPathPolicy::Auto;
  if (s == "mha") return MlaPathPolicy::Mha;
  if (s == "mqa") return MlaPathPolicy::Mqa;
  fail("unknown MLA path '{}' (expected auto, mha or mqa)", s);
}

MlaPath choose_mla_path(MlaPathPolicy policy, int64_t query_len, int64_t decode_threshold, MlaPath prefill) {
  switch (policy) {
    case MlaPathPolicy::Mha:
      return MlaPath::Mha;
    case MlaPathPolicy::Mqa:
      return MlaPath::Mqa;
    case MlaPathPolicy::Auto:
      break;
  }
  return query_len <= decode_threshold ? MlaPath::Mqa : prefill;
}

MlaPath cheaper_prefill_path(int64_t kv_lora, int64_t qk_nope, int64_t qk_rope, int64_t v_head, bool exact_kernels) {
  // Effective GMAC/s of each kernel per (query, row) pair and head, counting only the pair's own
  // multiply-adds (below; MQA's absorb and MHA's decompression are inside the rates), from
  // attn/[exact/]mqa_chunk and attn/[exact/]mha_chunk (512-token chunks at GLM-5 widths, depth
  // 2048, one thread, CPU time; docs/PERF.md). The rates are the build target's, fixed for a
  // binary, so the choice depends on the model's widths only, never on a chunk's length.
#if defined(__AVX512F__)
  // Zen 5, AVX-512: exact MQA 17.4, MHA 22.1; F32 MQA 58.3, MHA 39.3 (issue 25).
  const double kMqaGmacs = exact_kernels ? 17.4 : 58, kMhaGmacs = exact_kernels ? 22.1 : 39;
#else
  // Exact: the x86-64-v3 build on Zen 5, MQA 11.1, MHA 13.6 (issue 25). F32: 2-core Zen 3, AVX2 +
  // FMA, both kernels in 8-lane register tiles (MQA 23.0 / 27.0, MHA 15.9 / 16.0 at depth 2048 / 8192).
  const double kMqaGmacs = exact_kernels ? 11.1 : 25, kMhaGmacs = exact_kernels ? 13.6 : 16;
#endif
  const double mqa = static_cast<double>(2 * kv_lora + qk_rope) / kMqaGmacs;
  const double mha = static_cast<double>(qk_nope + qk_rope + v_head) / kMhaGmacs;
  return mqa <= mha ? MlaPath::Mqa : MlaPath::Mha;
}

void BatchMeta::choose_paths(MlaPathPolicy p, int64_t decode_threshold) {
  policy = p;
  for (auto& s : seqs) s.path = choose_mla_path(p, s.query_len, decode_threshold);
}

BatchMeta single_sequence_batch(const std::vector<int32_t>& tokens, int32_t n_past, bool all_logits,
                                MlaPathPolicy policy) {
  BatchMeta b;
  const int32_t n = static_cast<int32_t>(tokens.size());
  b.token_ids = tokens;
  for (int32_t i = 0; i < n; ++i) {
    b.positions.push_back(n_past + i);
    b.slot_mapping.push_back(n_past + i);
  }
  SeqMeta s;
  s.query_start = 0;
  s.query_len = n;
  s.context_len = n_past + n;
  s.slots_start = 0;
  b.seqs.push_back(s);
  for (int32_t j = 0; j < n_past + n; ++j) b.context_slots.push_back(j);
  if (all_logits)
    for (int32_t i = 0; i < n; ++i) b.logits_rows.push_back(i);
  else if (n > 0)
    b.logits_rows.push_back(n - 1);
  b.choose_paths(policy);
  return b;
}

}  // namespace mla
