#include "parallel/step_wire.h"

#include "util/error.h"

namespace mla {
namespace {

constexpr int kSeqInts = 6;  // query_start, query_len, context_len, slots_start, verify, n_prompt

void put(std::vector<int32_t>& out, const std::vector<int32_t>& v) { out.insert(out.end(), v.begin(), v.end()); }

}  // namespace

StepHeader encode_step(const BatchMeta& meta, const BlockCopies& copies, std::vector<int32_t>& payload) {
  StepHeader h;
  h.command = static_cast<int32_t>(StepCommand::Forward);
  h.n_tokens = static_cast<int32_t>(meta.token_ids.size());
  h.n_seqs = static_cast<int32_t>(meta.seqs.size());
  h.n_context_slots = static_cast<int32_t>(meta.context_slots.size());
  h.n_logits_rows = static_cast<int32_t>(meta.logits_rows.size());
  h.policy = static_cast<int32_t>(meta.policy);
  h.decode_threshold = meta.decode_threshold;
  h.n_copies = static_cast<int32_t>(copies.size());
  payload.clear();
  put(payload, meta.token_ids);
  put(payload, meta.positions);
  put(payload, meta.slot_mapping);
  for (const SeqMeta& s : meta.seqs)
    payload.insert(payload.end(), {s.query_start, s.query_len, s.context_len, s.slots_start,
                                   static_cast<int32_t>(s.verify), s.n_prompt});
  put(payload, meta.context_slots);
  put(payload, meta.logits_rows);
  for (const auto& [src, dst] : copies) payload.insert(payload.end(), {src, dst});
  h.payload_ints = static_cast<int32_t>(payload.size());
  return h;
}

void decode_step(const StepHeader& h, const std::vector<int32_t>& payload, BatchMeta& meta, BlockCopies& copies) {
  const int64_t want = 3 * int64_t{h.n_tokens} + kSeqInts * int64_t{h.n_seqs} + h.n_context_slots + h.n_logits_rows +
                       2 * int64_t{h.n_copies};
  if (h.n_tokens < 0 || h.n_seqs < 0 || h.n_context_slots < 0 || h.n_logits_rows < 0 || h.n_copies < 0 ||
      want != h.payload_ints || static_cast<int64_t>(payload.size()) != want)
    fail("step message: header announces {} values, payload has {}", want, payload.size());
  const int32_t* p = payload.data();
  auto take = [&p](std::vector<int32_t>& v, int32_t n) {
    v.assign(p, p + n);
    p += n;
  };
  take(meta.token_ids, h.n_tokens);
  take(meta.positions, h.n_tokens);
  take(meta.slot_mapping, h.n_tokens);
  meta.seqs.resize(h.n_seqs);
  for (SeqMeta& s : meta.seqs) {
    s.query_start = p[0];
    s.query_len = p[1];
    s.context_len = p[2];
    s.slots_start = p[3];
    s.verify = p[4] != 0;
    s.n_prompt = p[5];
    p += kSeqInts;
  }
  take(meta.context_slots, h.n_context_slots);
  take(meta.logits_rows, h.n_logits_rows);
  meta.policy = static_cast<MlaPathPolicy>(h.policy);
  meta.decode_threshold = h.decode_threshold;
  copies.resize(h.n_copies);
  for (auto& [src, dst] : copies) {
    src = p[0];
    dst = p[1];
    p += 2;
  }
}

}  // namespace mla
