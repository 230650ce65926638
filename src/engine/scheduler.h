#pragma once
// The continuous-batching scheduler (vLLM V1 semantics).
//
// Each step has a token budget (max_num_batched_tokens) and a cap on running sequences
// (max_num_seqs). Running sequences are served first, in admission order: each gets all its
// uncomputed tokens (1 for a decode, the rest of the prompt — or the next chunk of it — for a
// prefill) up to what is left of the budget. When the KV blocks run out, the most recently
// admitted running sequence is preempted (blocks freed, recomputed later from its tokens) until
// the current one fits. Then, if nothing was preempted, waiting sequences are admitted in FCFS
// order while budget, blocks and the cap allow; a waiting sequence first takes its prompt's
// cached prefix (never its last token, whose logits are needed). A 1-token prompt is scheduled
// exactly like a decode.
#include <deque>
#include <vector>

#include "engine/sequence.h"
#include "kv/kv_manager.h"

namespace mla {

struct SchedulerConfig {
  int max_num_batched_tokens = 2048;
  int max_num_seqs = 64;
  // Speculative decoding with K drafts (0: off). A running sequence's drafts are scheduled with its
  // last token (as many as the budget leaves room for), and every sequence gets KV slots for K
  // positions past its step (the MTP layer's rows and chained drafts) up to max_model_len. A
  // prefix-cache hit of H tokens recomputes position H - 1: the MTP layer's row at H needs the
  // trunk's hidden state there, which the cache does not hold.
  int num_speculative_tokens = 0;
  int max_model_len = 0;
  // Prompt logprobs (SamplingParams::prompt_logprobs) need a logits row per prompt token: the
  // prefill chunks of such sequences take at most this many tokens per step, all together. They
  // skip the prefix cache: a cached block has rows, not the logits at its positions.
  int max_prompt_logits_rows = 256;
  // Enter full blocks of generated tokens in the prefix cache too (ModelRunner::rows_depend_on_phase
  // false); otherwise only a sequence's blocks within its prompt.
  bool cache_generated_blocks = true;
};

struct SchedulerOutput {
  struct Item {
    Sequence* seq = nullptr;
    int n_computed = 0;   // seq->n_computed when scheduled
    int n_new = 0;        // computes tokens [n_computed, n_computed + n_new)
    bool verify = false;  // speculative verify rows: its last token, then its drafts (seq->drafts)
  };
  std::vector<Item> items;            // in batch order
  std::vector<kv::BlockCopy> copies;  // apply to the cache before the forward, in order
  std::vector<Sequence*> failed;      // cannot fit even alone (finish with an error)
  std::vector<Sequence*> preempted;   // blocks freed, waiting again: recomputed from position 0
  int n_preempted = 0;
  int64_t n_prefix_query_tokens = 0;
  int64_t n_prefix_hit_tokens = 0;
  bool empty() const { return items.empty(); }
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, kv::KvManager& kv);

  // Speculative decoding (SchedulerConfig::num_speculative_tokens, max_model_len), set once the
  // engine knows max_model_len.
  void configure_speculation(int num_speculative_tokens, int max_model_len) {
    config_.num_speculative_tokens = num_speculative_tokens;
    config_.max_model_len = max_model_len;
  }

  void add_waiting(Sequence* seq);  // FCFS tail
  void add_running(Sequence* seq);  // a forked sibling that already holds blocks
  // Removes seq from whichever queue holds it and frees its blocks.
  void remove(Sequence* seq);

  SchedulerOutput schedule();
  // After the forward: the scheduled tokens are computed. A verifying sequence is left as it was:
  // its computed length is what the sampler accepts of its drafts.
  void on_forward_done(const SchedulerOutput& out);
  // At the end of the step, once sampling and the MTP rows are done: full blocks enter the prefix
  // cache (both layers' rows in them are final then).
  void on_step_done(const SchedulerOutput& out);

  int n_running() const { return static_cast<int>(running_.size()); }
  int n_waiting() const { return static_cast<int>(waiting_.size()); }
  bool idle() const { return running_.empty() && waiting_.empty(); }
  const kv::KvManager& kv() const { return kv_; }

 private:
  // schedule()'s two passes; budget and logits_rows are what the step has left of each.
  void schedule_running(SchedulerOutput& out, int& budget, int& logits_rows);
  void admit_waiting(SchedulerOutput& out, int& budget, int& logits_rows);
  void preempt(Sequence* seq);
  int lookahead(const Sequence* seq, int n_new) const;
  int running_slots() const;

  SchedulerConfig config_;
  kv::KvManager& kv_;
  std::vector<Sequence*> running_;  // admission order: the tail is preempted first
  std::deque<Sequence*> waiting_;
};

}  // namespace mla
