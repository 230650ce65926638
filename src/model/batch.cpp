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
  b.policy = policy;
  return b;
}

void append_sequence_chunk(BatchMeta& b, uint64_t seq_id, std::span<const int32_t> tokens, int32_t n_past) {
  SeqMeta s;
  s.query_start = static_cast<int32_t>(b.token_ids.size());
  s.query_len = static_cast<int32_t>(tokens.size());
  s.context_len = n_past + s.query_len;
  s.seq_id = seq_id;
  b.seqs.push_back(s);
  for (int32_t i = 0; i < s.query_len; ++i) b.logits_rows.push_back(s.query_start + i);
  b.token_ids.insert(b.token_ids.end(), tokens.begin(), tokens.end());
}

}  // namespace mla
