#include "engine/batch_meta.h"

#include <algorithm>
#include <cassert>

namespace mla {

int BatchMeta::n_logit_rows() const {
  int n = 0;
  for (uint8_t x : needs_logits) n += x;
  return n;
}

void BatchMeta::clear() {
  token_ids.clear();
  positions.clear();
  slot_mapping.clear();
  query_start.clear();
  context_len.clear();
  path.clear();
  needs_logits.clear();
  block_table.clear();
  max_blocks = 0;
}

MlaPath choose_path(MlaPathPolicy policy, int n_q, int decode_threshold) {
  switch (policy) {
    case MlaPathPolicy::kMha: return MlaPath::kMha;
    case MlaPathPolicy::kMqa: return MlaPath::kMqa;
    case MlaPathPolicy::kAuto: break;
  }
  return n_q <= decode_threshold ? MlaPath::kMqa : MlaPath::kMha;
}

void build_batch_meta(std::span<const ScheduledSeq> seqs, int block_size, MlaPathPolicy policy,
                      int decode_threshold, BatchMeta& meta) {
  meta.clear();
  meta.block_size = block_size;
  meta.policy = policy;
  size_t max_blocks = 0;
  for (const auto& s : seqs) max_blocks = std::max(max_blocks, s.blocks.size());
  meta.max_blocks = static_cast<int>(max_blocks);
  meta.block_table.assign(seqs.size() * max_blocks, -1);
  meta.query_start.push_back(0);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const ScheduledSeq& s = seqs[i];
    assert(s.n_new >= 1 && s.n_computed + s.n_new <= static_cast<int>(s.tokens.size()));
    assert(static_cast<size_t>(s.n_computed + s.n_new) <= s.blocks.size() * block_size);
    for (int p = s.n_computed; p < s.n_computed + s.n_new; ++p) {
      meta.token_ids.push_back(s.tokens[p]);
      meta.positions.push_back(p);
      meta.slot_mapping.push_back(s.blocks[p / block_size] * block_size + p % block_size);
    }
    meta.query_start.push_back(static_cast<int32_t>(meta.token_ids.size()));
    meta.context_len.push_back(s.n_computed + s.n_new);
    meta.path.push_back(choose_path(policy, s.n_new, decode_threshold));
    meta.needs_logits.push_back(s.needs_logits ? 1 : 0);
    std::copy(s.blocks.begin(), s.blocks.end(), meta.block_table.begin() + i * max_blocks);
  }
}

}  // namespace mla
