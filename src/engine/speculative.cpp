#include "engine/speculative.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <utility>

#include "engine/batch_meta.h"
#include "engine/model_runner.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "util/error.h"
#include "util/log.h"

namespace mla {
namespace {

int32_t argmax_row(const float* row, int n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i)
    if (row[i] > row[best]) best = i;
  return best;
}

int32_t slot_of(const Sequence& s, int position, int block_size) {
  return s.blocks.table[position / block_size] * block_size + position % block_size;
}

}  // namespace

int parse_speculative_config(std::string_view text) {
  if (text.empty()) return 0;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    fail("--speculative-config: not valid JSON ({})", e.what());
  }
  if (!j.is_object())
    fail(R"(--speculative-config: expected a JSON object such as {{"method": "mtp", "num_speculative_tokens": 2}})");
  for (const auto& [key, value] : j.items())
    if (key != "method" && key != "num_speculative_tokens")
      fail("--speculative-config: unknown key '{}' (known: method, num_speculative_tokens)", key);
  if (!j.contains("method")) fail(R"(--speculative-config: "method" is missing (only "mtp" is supported))");
  if (!j["method"].is_string() || j["method"].get<std::string>() != "mtp")
    fail(R"(--speculative-config: method {} is not supported (only "mtp": the model's own MTP layer))",
         j["method"].dump());
  if (!j.contains("num_speculative_tokens")) fail("--speculative-config: num_speculative_tokens is missing");
  const auto& k = j["num_speculative_tokens"];
  if (!k.is_number_integer()) fail("--speculative-config: num_speculative_tokens must be an integer, got {}", k.dump());
  const auto n = k.get<int64_t>();
  if (n < 1 || n > kMaxSpeculativeTokens)
    fail("--speculative-config: num_speculative_tokens must be 1 to {}, got {}", kMaxSpeculativeTokens, n);
  return static_cast<int>(n);
}

SpecAcceptance spec_acceptance(int64_t n_drafts, int64_t n_draft_tokens, int64_t n_accepted_tokens) {
  SpecAcceptance s;
  const auto accepted = static_cast<double>(n_accepted_tokens);
  if (n_draft_tokens > 0) s.rate = accepted / static_cast<double>(n_draft_tokens);
  if (n_drafts > 0) s.mean_len = 1.0 + accepted / static_cast<double>(n_drafts);
  return s;
}

Speculator::Speculator(ModelRunner& runner, const EngineConfig& cfg, kv::KvManager& kv, int n_vocab)
    : runner_(runner), cfg_(cfg), kv_(kv), n_vocab_(n_vocab) {}

void Speculator::start() {
  const int k = cfg_.num_speculative_tokens;
  if (k < 0 || k > kMaxSpeculativeTokens)
    fail("engine: num_speculative_tokens must be 1 to {} (0: off), got {}", kMaxSpeculativeTokens, k);
  configured_ = k;
  if (k == 0) return;
  if (!runner_.has_mtp()) fail("engine: speculative decoding needs the model's MTP layer, which is not loaded");
  const int64_t need = int64_t{cfg_.max_num_batched_tokens} + cfg_.max_num_seqs;
  if (runner_.max_batch_tokens() < need)
    fail(
        "engine: with speculative decoding the model's batch must hold max-num-batched-tokens + max-num-seqs = {} "
        "tokens, it holds {}",
        need, runner_.max_batch_tokens());
  n_embd_ = runner_.hidden_dim();
  n_accepted_per_pos_.assign(k, 0);
  log().info("speculative decoding: method mtp, {} draft token(s) per step", k);
}

void Speculator::append_drafts(Sequence& seq) {
  seq.tokens.insert(seq.tokens.end(), seq.drafts.begin(), seq.drafts.end());
}

void Speculator::forward(const BatchMeta& meta, float* logits) {
  const size_t n_hidden = static_cast<size_t>(meta.n_tokens()) * n_embd_;
  if (hidden_.size() < n_hidden) hidden_.resize(n_hidden);
  runner_.forward_hidden(meta, logits, hidden_.data());
  if (std::any_of(meta.seqs.begin(), meta.seqs.end(), [](const SeqMeta& m) { return m.verify; })) ++n_steps_;
}

int Speculator::draft_budget(const Sequence& seq) const {
  if (cfg_.num_speculative_tokens <= 0 || seq.grammar) return 0;
  const int n_tokens = static_cast<int>(seq.tokens.size());
  // The verify step computes positions n_tokens - 1 .. n_tokens - 1 + k and yields up to k + 1 tokens.
  const int by_len = cfg_.max_model_len - n_tokens;
  const int by_max = seq.req->params.max_tokens - seq.n_generated() - 1;
  return std::max(0, std::min({cfg_.num_speculative_tokens, by_len, by_max}));
}

void Speculator::accept(Sequence& seq, const float* rows, int n_rows, int position, Sampler& sampler,
                        const AppendToken& append) {
  Request& r = *seq.req;
  const int k = n_rows - 1;
  seq.tokens.resize(seq.tokens.size() - k);  // the drafts were appended for the batch
  int n_accepted = 0;
  for (int i = 0; i <= k; ++i) {
    const float* row = rows + static_cast<size_t>(i) * n_vocab_;
    if (cfg_.on_logits) cfg_.on_logits(r.id, seq.index, position + i, std::span<const float>(row, n_vocab_));
    bool accepted = false;
    const SampleResult res =
        i < k ? sampler.sample_draft(row, r.params, seq.penalties, seq.n_generated(), cfg_.eos_token_ids, seq.rng,
                                     seq.drafts[i], accepted)
              : sampler.sample(row, r.params, seq.penalties, seq.n_generated(), cfg_.eos_token_ids, seq.rng);
    if (accepted) {
      ++n_accepted;
      ++n_accepted_per_pos_[i];
    }
    append(seq, res);
    if (!accepted || seq.status == SeqStatus::kFinished || r.aborted) break;
  }
  ++n_drafts_;
  n_draft_tokens_ += k;
  n_accepted_tokens_ += n_accepted;
  seq.drafts.clear();
  // The trunk rows of the accepted tokens are final; those of rejected drafts are past
  // n_computed and will be overwritten before anything reads them.
  seq.n_computed = static_cast<int>(seq.tokens.size()) - 1;
}

void Speculator::on_fork(Sequence& first) {
  if (!active() || first.req->params.n <= 1) return;
  kv_.truncate(first.blocks, first.n_computed);
  first.mtp_hold = true;
}

void Speculator::begin_batch() {
  reset_batch_meta(mtp_meta_, cfg_.path_policy, cfg_.decode_threshold);  // add_rows lists the context slots
  mtp_h_in_.clear();
}

void Speculator::add_rows(const Sequence& s, int q0, int q1, const int32_t* chained_token, const float* h_first,
                          const float* h_rest) {
  BatchMeta& m = mtp_meta_;
  const int bs = kv_.block_size();
  const size_t E = static_cast<size_t>(n_embd_);
  SeqMeta sm;
  sm.query_start = static_cast<int32_t>(m.token_ids.size());
  sm.query_len = q1 - q0 + 1;
  sm.context_len = q1;
  sm.slots_start = static_cast<int32_t>(m.context_slots.size());
  for (int p = 1; p <= q1; ++p) m.context_slots.push_back(slot_of(s, p, bs));
  for (int q = q0; q <= q1; ++q) {
    m.token_ids.push_back(chained_token ? *chained_token : s.tokens[q]);
    m.positions.push_back(q);
    m.slot_mapping.push_back(slot_of(s, q, bs));
    const float* hq = q == q0 ? h_first : h_rest + static_cast<size_t>(q - q0 - 1) * E;
    mtp_h_in_.insert(mtp_h_in_.end(), hq, hq + E);
  }
  m.seqs.push_back(sm);
}

void Speculator::run_batch() {
  const size_t E = static_cast<size_t>(n_embd_);
  const size_t n = mtp_meta_.token_ids.size();
  if (mtp_h_out_.size() < n * E) mtp_h_out_.resize(n * E);
  const size_t n_logits = mtp_meta_.logits_rows.size() * static_cast<size_t>(n_vocab_);
  if (mtp_logits_.size() < n_logits) mtp_logits_.resize(n_logits);
  const auto t0 = std::chrono::steady_clock::now();
  runner_.forward_mtp(mtp_meta_, mtp_h_in_.data(), mtp_logits_.data(), mtp_h_out_.data());
  mtp_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void Speculator::add_computable_rows(Sequence& s, int n_computed_before, int32_t row0) {
  const size_t E = static_cast<size_t>(n_embd_);
  const bool finished = s.status == SeqStatus::kFinished;
  // This step computed the trunk rows a..b - 1 (batch rows row0...); b is the computed length now.
  const int a = n_computed_before, b = s.n_computed;
  const int q0 = std::max(s.mtp_valid + 1, 1);
  const int q1 = finished || s.mtp_hold ? b - 1 : b;
  if (q0 <= q1) {
    if (q0 < a || (q0 == a && s.pending_h.size() != E)) {
      // Cannot happen by construction (the rows before a step's first position are final).
      log().error("mtp: sequence of {} lacks the hidden state for position {}; it stops speculating", s.req->id,
                  q0 - 1);
      return;
    }
    // Row q pairs the trunk's h at q - 1 with token q: h at a - 1 was kept from the previous step.
    const float* h_first = q0 == a ? s.pending_h.data() : hidden_.data() + (row0 + q0 - 1 - a) * E;
    add_rows(s, q0, q1, nullptr, h_first, hidden_.data() + (row0 + q0 - a) * E);
    s.mtp_valid = q1;
    // Drafts only in the decode state: every token but the last one computed.
    const bool decoding = static_cast<int>(s.tokens.size()) == b + 1;
    const int n_draft = finished || q1 != b || !decoding ? 0 : draft_budget(s);
    if (n_draft > 0) {
      mtp_meta_.logits_rows.push_back(static_cast<int32_t>(mtp_meta_.token_ids.size()) - 1);
      drafting_.push_back({&s, static_cast<int>(mtp_meta_.token_ids.size()) - 1, n_draft});
    }
  }
  if (s.mtp_valid < b) {  // the next step's first MTP row needs the trunk's h at b - 1
    const float* hb = hidden_.data() + (row0 + b - 1 - a) * E;
    s.pending_h.assign(hb, hb + E);
  }
}

void Speculator::chain_drafts() {
  const size_t E = static_cast<size_t>(n_embd_);
  for (int k = 1; k < cfg_.num_speculative_tokens; ++k) {
    std::swap(mtp_h_out_, mtp_h_prev_);  // the previous call's outputs are this call's h inputs
    begin_batch();
    size_t n_chain = 0;
    for (Drafting& d : drafting_) {
      if (d.n_draft <= k) continue;
      const Sequence& s = *d.seq;
      const float* hq = mtp_h_prev_.data() + static_cast<size_t>(d.h_row) * E;
      add_rows(s, s.n_computed + k, s.n_computed + k, &s.drafts.back(), hq, nullptr);
      mtp_meta_.logits_rows.push_back(static_cast<int32_t>(n_chain));
      d.h_row = static_cast<int>(n_chain++);
    }
    if (n_chain == 0) break;
    run_batch();
    for (Drafting& d : drafting_)
      if (d.n_draft > k)
        d.seq->drafts.push_back(argmax_row(mtp_logits_.data() + static_cast<size_t>(d.h_row) * n_vocab_, n_vocab_));
  }
}

void Speculator::release_forks(const SchedulerOutput& plan) {
  for (const auto& item : plan.items) {
    Sequence* s = item.seq;
    if (!s->mtp_hold) continue;
    s->mtp_hold = false;
    for (auto& sib : s->req->seqs) {
      if (sib.get() == s) continue;
      sib->mtp_valid = s->mtp_valid;
      sib->pending_h = s->pending_h;
    }
  }
}

void Speculator::draft(const SchedulerOutput& plan, const BatchMeta& meta) {
  begin_batch();
  drafting_.clear();
  for (size_t i = 0; i < plan.items.size(); ++i) {
    Sequence& s = *plan.items[i].seq;
    if (s.blocks.table.empty()) continue;  // ended by an error this step
    add_computable_rows(s, plan.items[i].n_computed, meta.seqs[i].query_start);
  }
  if (!mtp_meta_.token_ids.empty()) run_batch();
  for (size_t j = 0; j < drafting_.size(); ++j)
    drafting_[j].seq->drafts.assign(1, argmax_row(mtp_logits_.data() + j * n_vocab_, n_vocab_));
  chain_drafts();
  release_forks(plan);
}

void Speculator::write_counters(EngineCounters& c) const {
  c.n_spec_drafts = n_drafts_;
  c.n_spec_draft_tokens = n_draft_tokens_;
  c.n_spec_accepted_tokens = n_accepted_tokens_;
  c.n_spec_accepted_per_pos = n_accepted_per_pos_;
  c.n_spec_steps = n_steps_;
  c.mtp_seconds = mtp_seconds_;
}

}  // namespace mla
