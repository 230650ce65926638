#pragma once
// The engine's state (Engine::Impl), shared by engine.cpp (the loop) and nothing else outside
// src/engine: a private header, so that engine.cpp stays one concern per screenful.
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/batch_meta.h"
#include "engine/engine.h"
#include "engine/mask_worker.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/speculative.h"
#include "kv/tier_store.h"

namespace mla {

struct Engine::Impl {
  Impl(std::unique_ptr<ModelRunner> r, EngineConfig c, std::shared_ptr<const TextDecoder> d);

  // Engine thread only. A step: schedule → build_batch → run_forward → sample → update.
  bool step();
  SchedulerOutput schedule(std::vector<Request*>& touched);
  void build_batch(const SchedulerOutput& plan);
  void run_forward();
  void sample(const SchedulerOutput& plan, std::vector<Request*>& touched);
  void update(const SchedulerOutput& plan, std::vector<Request*>& touched);

  void drain_inbox(std::vector<Request*>& touched);
  void admit(std::unique_ptr<Request> req);
  void finish_request(Request& req, FinishReason reason, const std::string& error);
  void start_masks(const SchedulerOutput& plan);
  void sample_seq(Sequence* seq, const float* row, const MaskJob* mask, std::vector<Request*>& touched);
  // The first sequence of a request with n > 1 has sampled from `row`: its siblings start from
  // the same logits and share its prompt's blocks.
  void fork(Sequence* seq, const float* row, std::span<const uint32_t> allowed);
  // A request's sequence `index`, with the next engine sequence id (SeqMeta::seq_id).
  Sequence& new_sequence(Request& r, int index);
  // Out of the scheduler, its blocks and the runner's state for it freed.
  void remove_sequence(Sequence* s);
  void append_token(Sequence* seq, const SampleResult& res);
  // max_tokens 0: the prompt is computed (and scored), nothing is sampled; every sequence of the
  // request ends with finish reason length.
  void finish_unsampled(Sequence* seq);
  // A prompt-logprobs row at `position` (it predicts prompt token position + 1).
  void add_prompt_logprob(Sequence& seq, int position, const float* row);
  void flush_finished();  // frees the sequences that finished this step
  void emit(std::vector<Request*>& touched);
  void update_counters();
  void count_finish_reason(const Request& r);
  void store_new_blocks();                     // the prefix cache's lower tiers: blocks the arena cached this step
  void enqueue(std::unique_ptr<Request> req);  // any thread
  void run_loop();

  std::unique_ptr<ModelRunner> runner;
  EngineConfig cfg;
  std::shared_ptr<const TextDecoder> decoder;
  int n_vocab;
  std::unique_ptr<kv::TierStore> tiers;  // cfg.kv_tiers; null when off
  kv::KvManager kv;
  Scheduler sched;
  Sampler sampler;
  Speculator spec;  // speculative decoding (cfg.num_speculative_tokens > 0)
  BatchMeta meta;
  std::vector<ScheduledSeq> scheduled;
  std::vector<float> logits;
  // Grammar masks of the step's constrained sequences (see start_masks).
  MaskWorker mask_worker;
  std::vector<MaskJob> mask_jobs;
  std::vector<uint32_t> mask_buf;  // mask_jobs.size() * token_mask_words(n_vocab)
  std::vector<int> mask_of_item;   // per plan item: index into mask_jobs, or -1
  std::unordered_map<std::string, std::unique_ptr<Request>> requests;
  EngineCounters totals;                    // the cumulative part, engine thread
  std::vector<Sequence*> finished_pending;  // finished in this step; their blocks are freed at its end
  uint64_t last_seq_id = 0;                 // Sequence::id of the newest sequence

  // Shared with other threads.
  mutable std::mutex mu;
  std::condition_variable wake;
  std::vector<std::unique_ptr<Request>> inbox_add;
  std::vector<std::string> inbox_abort;
  std::unordered_set<std::string> active_ids;  // added and not yet finished
  bool stop_requested = false;
  std::thread loop;

  mutable std::mutex counters_mu;
  EngineCounters snapshot;
};

}  // namespace mla
