#include "engine/batch_meta.h"

#include <cassert>

namespace mla {

void reset_batch_meta(BatchMeta& meta, MlaPathPolicy policy, int decode_threshold) {
  meta.token_ids.clear();
  meta.positions.clear();
  meta.slot_mapping.clear();
  meta.seqs.clear();
  meta.context_slots.clear();
  meta.logits_rows.clear();
  meta.policy = policy;
  meta.decode_threshold = decode_threshold;
}

void build_batch_meta(std::span<const ScheduledSeq> seqs, int block_size, MlaPathPolicy policy, int decode_threshold,
                      bool all_logits, BatchMeta& meta) {
  reset_batch_meta(meta, policy, decode_threshold);
  for (const ScheduledSeq& s : seqs) {
    const int n_ctx = s.n_computed + s.n_new;
    assert(s.n_new >= 1 && n_ctx <= static_cast<int>(s.tokens.size()));
    assert(static_cast<size_t>(n_ctx) <= s.blocks.size() * block_size);
    SeqMeta m;
    m.query_start = static_cast<int32_t>(meta.token_ids.size());
    m.query_len = s.n_new;
    m.context_len = n_ctx;
    m.slots_start = static_cast<int32_t>(meta.context_slots.size());
    m.verify = s.verify;
    m.n_prompt = s.n_prompt;
    m.seq_id = s.seq_id;
    for (int j = 0; j < n_ctx; ++j)
      meta.context_slots.push_back(s.blocks[j / block_size] * block_size + j % block_size);
    for (int p = s.n_computed; p < n_ctx; ++p) {
      meta.token_ids.push_back(s.tokens[p]);
      meta.positions.push_back(p);
      meta.slot_mapping.push_back(meta.context_slots[m.slots_start + p]);
    }
    if (all_logits || s.verify || s.prompt_logits) {
      for (int i = 0; i < m.query_len; ++i) meta.logits_rows.push_back(m.query_start + i);
    } else if (s.needs_logits) {
      meta.logits_rows.push_back(m.query_start + m.query_len - 1);
    }
    meta.seqs.push_back(m);
  }
}

}  // namespace mla
