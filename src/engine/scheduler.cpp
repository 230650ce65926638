#include "engine/scheduler.h"

#include <algorithm>
#include <cassert>

namespace mla {

Scheduler::Scheduler(SchedulerConfig config, kv::KvManager& kv) : config_(config), kv_(kv) {}

void Scheduler::add_waiting(Sequence* seq) {
  seq->status = SeqStatus::kWaiting;
  waiting_.push_back(seq);
}

void Scheduler::add_running(Sequence* seq) {
  seq->status = SeqStatus::kRunning;
  running_.push_back(seq);
}

void Scheduler::remove(Sequence* seq) {
  if (auto it = std::find(running_.begin(), running_.end(), seq); it != running_.end()) running_.erase(it);
  if (auto it = std::find(waiting_.begin(), waiting_.end(), seq); it != waiting_.end()) waiting_.erase(it);
  kv_.free(seq->blocks);
  seq->status = SeqStatus::kFinished;
}

int Scheduler::running_slots() const {
  int n = 0;
  for (const Sequence* s : running_) n += s->n_slots;
  return n;
}

int Scheduler::lookahead(const Sequence* seq, int n_new) const {
  if (config_.num_speculative_tokens <= 0) return 0;
  return std::max(0, std::min(config_.num_speculative_tokens, config_.max_model_len - (seq->n_computed + n_new)));
}

void Scheduler::preempt(Sequence* seq) {
  kv_.free(seq->blocks);
  seq->drafts.clear();
  seq->mtp_valid = 0;
  seq->n_computed = 0;
  seq->status = SeqStatus::kWaiting;
  waiting_.push_front(seq);
}

namespace {

// n_new under the prompt-logits cap (0: none left this step), which it takes from logits_rows.
int cap_logits_rows(const Sequence* seq, int n_new, int& logits_rows) {
  if (!seq->wants_prompt_logits()) return n_new;
  n_new = std::min(n_new, logits_rows);
  logits_rows -= n_new;
  return n_new;
}

}  // namespace

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int budget = config_.max_num_batched_tokens;
  int logits_rows = config_.max_prompt_logits_rows;
  schedule_running(out, budget, logits_rows);
  if (out.n_preempted == 0) admit_waiting(out, budget, logits_rows);
  return out;
}

// Running sequences first, in admission order; preempts from the tail when blocks run out.
void Scheduler::schedule_running(SchedulerOutput& out, int& budget, int& logits_rows) {
  size_t i = 0;
  while (i < running_.size() && budget > 0) {
    Sequence* seq = running_[i];
    const int n_base = static_cast<int>(seq->tokens.size()) - seq->n_computed;
    const int n_new =
        cap_logits_rows(seq, std::min(n_base + static_cast<int>(seq->drafts.size()), budget), logits_rows);
    if (n_new == 0) {  // its prompt logits wait for the next step
      ++i;
      continue;
    }
    seq->drafts.resize(std::max(0, n_new - n_base));  // the drafts the budget leaves room for
    bool fits = true;
    while (!kv_.allocate(seq->blocks, seq->n_computed, n_new + lookahead(seq, n_new), nullptr, out.copies)) {
      Sequence* victim = running_.back();
      running_.pop_back();
      if (victim == seq && out.items.empty() && running_.empty()) {
        out.failed.push_back(seq);  // alone and still too big
        fits = false;
        break;
      }
      preempt(victim);
      out.preempted.push_back(victim);
      ++out.n_preempted;
      if (victim == seq) {
        fits = false;
        break;
      }
    }
    if (!fits) break;
    out.items.push_back({seq, seq->n_computed, n_new, !seq->drafts.empty()});
    budget -= n_new;
    ++i;
  }
}

// Then waiting sequences, FCFS (not on a step that had to preempt).
void Scheduler::admit_waiting(SchedulerOutput& out, int& budget, int& logits_rows) {
  int slots = running_slots();
  while (!waiting_.empty() && budget > 0) {
    Sequence* seq = waiting_.front();
    if (slots + seq->n_slots > config_.max_num_seqs) break;
    const int n_tokens = static_cast<int>(seq->tokens.size());
    // A scored prompt (prompt logprobs) neither takes nor counts a prefix hit.
    const bool use_prefix_cache = kv_.prefix_caching() && !seq->wants_prompt_logits();
    kv::PrefixHit hit;
    int n_cached = 0, n_found = 0;
    if (use_prefix_cache) {
      hit = kv_.find_prefix(seq->tokens);
      n_found = n_cached = std::min(hit.n_tokens, n_tokens - 1);
      // Speculation: the hit's last position is recomputed (its hidden state feeds the MTP row
      // after it); the cache still served it, so it counts as a hit.
      if (config_.num_speculative_tokens > 0 && hit.n_tokens > 0) n_cached = std::min(n_cached, hit.n_tokens - 1);
    }
    const int n_new = cap_logits_rows(seq, std::min(n_tokens - n_cached, budget), logits_rows);
    if (n_new == 0) break;       // FCFS: it waits for the next step's logits rows
    seq->n_computed = n_cached;  // for lookahead(); committed below
    if (!kv_.allocate(seq->blocks, n_cached, n_new + lookahead(seq, n_new), n_cached > 0 ? &hit : nullptr,
                      out.copies)) {
      if (running_.empty() && out.items.empty()) {  // nothing else holds blocks
        waiting_.pop_front();
        out.failed.push_back(seq);
        continue;
      }
      break;
    }
    waiting_.pop_front();
    seq->n_computed = n_cached;
    seq->mtp_valid = n_cached;  // the MTP rows of the cached blocks were written with them
    seq->status = SeqStatus::kRunning;
    running_.push_back(seq);
    slots += seq->n_slots;
    out.items.push_back({seq, n_cached, n_new, false});
    budget -= n_new;
    if (use_prefix_cache) {
      out.n_prefix_query_tokens += n_tokens;
      out.n_prefix_hit_tokens += n_found;
    }
    if (seq->req->n_cached_tokens < 0 && seq->index == 0) seq->req->n_cached_tokens = std::min(n_found, seq->n_prompt);
  }
}

void Scheduler::on_forward_done(const SchedulerOutput& out) {
  for (const auto& item : out.items)
    if (!item.verify) item.seq->n_computed = item.n_computed + item.n_new;
}

void Scheduler::on_step_done(const SchedulerOutput& out) {
  for (const auto& item : out.items) {
    Sequence* seq = item.seq;
    if (seq->blocks.table.empty()) continue;
    const int n_cacheable = config_.cache_generated_blocks ? seq->n_computed : std::min(seq->n_computed, seq->n_prompt);
    kv_.cache_full_blocks(seq->blocks, seq->tokens, n_cacheable);
  }
}

}  // namespace mla
