// The engine loop: inbox (add/abort from any thread) → scheduler → BatchMeta → model forward →
// sampler → stop checks and text → per-request outputs.
#include "engine/engine.h"

#include <algorithm>
#include <cassert>
#include <random>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "engine/batch_meta.h"
#include "engine/mask_worker.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "grammar/token_mask.h"
#include "util/error.h"
#include "util/log.h"

namespace mla {

struct Engine::Impl {
  Impl(std::unique_ptr<ModelRunner> r, EngineConfig c, std::shared_ptr<const TextDecoder> d);

  // Engine thread only.
  bool step();
  void drain_inbox(std::vector<Request*>& touched);
  void admit(std::unique_ptr<Request> req);
  void finish_request(Request& req, FinishReason reason, const std::string& error);
  void start_masks(const SchedulerOutput& plan);
  void sample_seq(Sequence* seq, const float* row, const MaskJob* mask, std::vector<Request*>& touched);
  void append_token(Sequence* seq, const SampleResult& res);
  // Speculative decoding: the verify rows of seq (its last accepted token, then its drafts).
  void accept_drafts(Sequence* seq, const float* rows, int n_rows, int position, std::vector<Request*>& touched);
  // After the step's sampling: the MTP layer's rows of every scheduled sequence, then the drafts.
  void run_mtp(const SchedulerOutput& plan);
  int draft_budget(const Sequence* seq) const;  // drafts seq may carry into the next step
  void flush_finished();                        // frees the sequences that finished this step
  void emit(std::vector<Request*>& touched);
  void update_counters();
  void enqueue(std::unique_ptr<Request> req);  // any thread
  void run_loop();

  std::unique_ptr<ModelRunner> runner;
  EngineConfig cfg;
  std::shared_ptr<const TextDecoder> decoder;
  int n_vocab;
  kv::KvManager kv;
  Scheduler sched;
  Sampler sampler;
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
  std::vector<int> n_before;                // per plan item: n_computed before the step
  // Speculative decoding (cfg.num_speculative_tokens > 0).
  int n_embd = 0;
  int configured_spec = 0;    // cfg.num_speculative_tokens at start-up (set_speculative_tokens changes the other)
  std::vector<float> hidden;  // the trunk's final normed state of every batch row
  BatchMeta mtp_meta;
  std::vector<float> mtp_h_in, mtp_h_out, mtp_h_prev, mtp_logits;
  struct Drafting {
    Sequence* seq;
    int h_row;  // its last row in mtp_h_out
    int n_draft;
  };
  std::vector<Drafting> drafting;

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

Engine::Impl::Impl(std::unique_ptr<ModelRunner> r, EngineConfig c, std::shared_ptr<const TextDecoder> d)
    : runner(std::move(r)),
      cfg(std::move(c)),
      decoder(std::move(d)),
      n_vocab(runner->n_vocab()),
      kv(runner->cache().n_blocks(), runner->cache().block_size(), cfg.enable_prefix_caching),
      sched({cfg.max_num_batched_tokens, cfg.max_num_seqs}, kv),
      sampler(n_vocab) {
  if (cfg.max_num_batched_tokens < 1)
    fail("engine: max-num-batched-tokens must be >= 1, got {}", cfg.max_num_batched_tokens);
  if (cfg.max_num_seqs < 1) fail("engine: max-num-seqs must be >= 1, got {}", cfg.max_num_seqs);
  if (cfg.decode_threshold < 1) fail("engine: decode threshold must be >= 1, got {}", cfg.decode_threshold);
  for (int32_t t : cfg.eos_token_ids)
    if (t < 0 || t >= n_vocab) fail("engine: EOS token {} out of range [0, {})", t, n_vocab);
  const int64_t capacity = runner->cache().n_slots();
  int64_t max_len = cfg.max_model_len > 0 ? cfg.max_model_len : runner->max_context();
  if (max_len > capacity) {
    log().info("max model length {} capped to the KV cache capacity of {} tokens", max_len, capacity);
    max_len = capacity;
  }
  if (max_len < 2) fail("engine: max model length {} leaves no room to generate", max_len);
  cfg.max_model_len = static_cast<int>(max_len);
  if (cfg.num_speculative_tokens < 0 || cfg.num_speculative_tokens > 4)
    fail("engine: num_speculative_tokens must be 1 to 4 (0: off), got {}", cfg.num_speculative_tokens);
  if (cfg.num_speculative_tokens > 0) {
    if (!runner->has_mtp()) fail("engine: speculative decoding needs the model's MTP layer, which is not loaded");
    const int64_t need = int64_t{cfg.max_num_batched_tokens} + cfg.max_num_seqs;
    if (runner->max_batch_tokens() < need)
      fail(
          "engine: with speculative decoding the model's batch must hold max-num-batched-tokens + max-num-seqs = {} "
          "tokens, it holds {}",
          need, runner->max_batch_tokens());
    n_embd = runner->hidden_dim();
    sched.configure_speculation(cfg.num_speculative_tokens, cfg.max_model_len);
    totals.n_spec_accepted_per_pos.assign(cfg.num_speculative_tokens, 0);
    configured_spec = cfg.num_speculative_tokens;
    log().info("speculative decoding: method mtp, {} draft token(s) per step", cfg.num_speculative_tokens);
  }
  if (cfg.path_policy == MlaPathPolicy::Auto)
    log().info("mla path auto: query length <= {} down mqa, longer (prefill chunks) down {}", cfg.decode_threshold,
               mla_path_name(runner->auto_prefill_path()));
  logits.resize(static_cast<size_t>(cfg.all_logits ? cfg.max_num_batched_tokens : cfg.max_num_seqs) * n_vocab);
  update_counters();
}

void Engine::Impl::admit(std::unique_ptr<Request> req) {
  Request* r = req.get();
  auto seq = std::make_unique<Sequence>();
  seq->req = r;
  seq->tokens = r->prompt;
  seq->n_prompt = static_cast<int>(r->prompt.size());
  seq->n_slots = r->params.n;
  seq->rng = Rng(*r->params.seed);
  seq->penalties.set_prompt(r->prompt);
  seq->output.start(decoder.get(), r->prompt, r->params);
  if (r->params.grammar) seq->grammar = std::make_unique<GrammarMatcher>(r->params.grammar);
  sched.add_waiting(seq.get());
  r->seqs.push_back(std::move(seq));
  totals.n_prompt_tokens += static_cast<int64_t>(r->prompt.size());
  requests.emplace(r->id, std::move(req));
}

void Engine::Impl::drain_inbox(std::vector<Request*>& touched) {
  std::vector<std::unique_ptr<Request>> adds;
  std::vector<std::string> aborts;
  {
    std::lock_guard lk(mu);
    adds.swap(inbox_add);
    aborts.swap(inbox_abort);
  }
  for (auto& r : adds) admit(std::move(r));
  for (const auto& id : aborts) {
    auto it = requests.find(id);
    if (it == requests.end() || it->second->aborted) continue;
    finish_request(*it->second, FinishReason::kAbort, "");
    touched.push_back(it->second.get());
  }
}

// Ends every unfinished sequence of req (abort or error) and frees its blocks.
void Engine::Impl::finish_request(Request& req, FinishReason reason, const std::string& error) {
  req.aborted = true;
  req.error = error;
  for (auto& s : req.seqs) {
    if (s->status == SeqStatus::kFinished) continue;
    s->output.finish_external(reason);
    sched.remove(s.get());
    ++req.n_finished;
  }
  // Before the fork the other n - 1 sequences do not exist yet; they end with it.
  if (!req.forked) {
    for (int i = 1; i < req.params.n; ++i) {
      auto s = std::make_unique<Sequence>();
      s->req = &req;
      s->index = i;
      s->tokens = req.prompt;
      s->n_prompt = static_cast<int>(req.prompt.size());
      s->status = SeqStatus::kFinished;
      s->output.finish_external(reason);
      req.seqs.push_back(std::move(s));
      ++req.n_finished;
    }
    req.forked = true;
  }
}

void Engine::Impl::append_token(Sequence* seq, const SampleResult& res) {
  Request& r = *seq->req;
  if (r.aborted) return;  // ended by an error earlier in this step
  bool grammar_ended = false;
  if (seq->grammar) {
    // The mask allowed only tokens the grammar accepts; a refusal means the mask and the
    // sampler disagree (e.g. every token masked), which ends the request rather than the server.
    if (!seq->grammar->accept(res.token)) {
      finish_request(r, FinishReason::kError,
                     fmt::format("request {}: the grammar does not allow the sampled token {}", r.id, res.token));
      log().error("{}", r.error);
      return;
    }
    grammar_ended = seq->grammar->terminated();
  }
  seq->tokens.push_back(res.token);
  seq->penalties.add_output(res.token);
  ++totals.n_generation_tokens;
  const bool at_max_len = static_cast<int>(seq->tokens.size()) >= cfg.max_model_len;
  auto fin = seq->output.on_token(res.token, res.logprobs, seq->n_generated(), at_max_len, r.params, cfg.eos_token_ids);
  if (!fin && grammar_ended) {
    seq->output.finish_grammar_end();
    fin = FinishReason::kStop;
  }
  if (fin) {
    // Its blocks stay until the step's end: the MTP rows and the prefix cache still see them.
    seq->status = SeqStatus::kFinished;
    finished_pending.push_back(seq);
    ++r.n_finished;
  }
}

void Engine::Impl::flush_finished() {
  for (Sequence* s : finished_pending) sched.remove(s);
  finished_pending.clear();
}

int Engine::Impl::draft_budget(const Sequence* seq) const {
  if (cfg.num_speculative_tokens <= 0 || seq->grammar) return 0;
  const int n_tokens = static_cast<int>(seq->tokens.size());
  // The verify step computes positions n_tokens - 1 .. n_tokens - 1 + k and yields up to k + 1 tokens.
  const int by_len = cfg.max_model_len - n_tokens;
  const int by_max = seq->req->params.max_tokens - seq->n_generated() - 1;
  return std::max(0, std::min({cfg.num_speculative_tokens, by_len, by_max}));
}

void Engine::Impl::accept_drafts(Sequence* seq, const float* rows, int n_rows, int position,
                                 std::vector<Request*>& touched) {
  Request& r = *seq->req;
  touched.push_back(&r);
  const int k = n_rows - 1;
  seq->tokens.resize(seq->tokens.size() - k);  // the drafts were appended for the batch
  int n_accepted = 0;
  for (int i = 0; i <= k; ++i) {
    const float* row = rows + static_cast<size_t>(i) * n_vocab;
    if (cfg.on_logits) cfg.on_logits(r.id, seq->index, position + i, std::span<const float>(row, n_vocab));
    bool accepted = false;
    const SampleResult res =
        i < k ? sampler.sample_draft(row, r.params, seq->penalties, seq->n_generated(), cfg.eos_token_ids, seq->rng,
                                     seq->drafts[i], accepted)
              : sampler.sample(row, r.params, seq->penalties, seq->n_generated(), cfg.eos_token_ids, seq->rng);
    if (accepted) {
      ++n_accepted;
      ++totals.n_spec_accepted_per_pos[i];
    }
    append_token(seq, res);
    if (!accepted || seq->status == SeqStatus::kFinished || r.aborted) break;
  }
  ++totals.n_spec_drafts;
  totals.n_spec_draft_tokens += k;
  totals.n_spec_accepted_tokens += n_accepted;
  seq->drafts.clear();
  // The trunk rows of the accepted tokens are final; those of rejected drafts are past
  // n_computed and will be overwritten before anything reads them.
  seq->n_computed = static_cast<int>(seq->tokens.size()) - 1;
}

namespace {

int32_t argmax_row(const float* row, int n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i)
    if (row[i] > row[best]) best = i;
  return best;
}

int32_t slot_of(const Sequence* s, int position, int block_size) {
  return s->blocks.table[position / block_size] * block_size + position % block_size;
}

}  // namespace

void Engine::Impl::run_mtp(const SchedulerOutput& plan) {
  const int bs = kv.block_size();
  const size_t E = static_cast<size_t>(n_embd);
  auto begin_batch = [&] {
    BatchMeta& m = mtp_meta;
    m.token_ids.clear();
    m.positions.clear();
    m.slot_mapping.clear();
    m.seqs.clear();
    m.context_slots.clear();
    m.logits_rows.clear();
    m.block_table.clear();
    m.block_size = 0;  // context_slots are given
    m.policy = cfg.path_policy;
    m.decode_threshold = cfg.decode_threshold;
    mtp_h_in.clear();
  };
  // One sequence's MTP rows at positions q0..q1 (tokens[q], or `token` for a single chained row),
  // attending positions 1..q1; h(q) gives the h input of row q.
  auto add_rows = [&](Sequence* s, int q0, int q1, const int32_t* chained_token, auto&& h) {
    BatchMeta& m = mtp_meta;
    SeqMeta sm;
    sm.query_start = static_cast<int32_t>(m.token_ids.size());
    sm.query_len = q1 - q0 + 1;
    sm.context_len = q1;
    sm.slots_start = static_cast<int32_t>(m.context_slots.size());
    for (int p = 1; p <= q1; ++p) m.context_slots.push_back(slot_of(s, p, bs));
    for (int q = q0; q <= q1; ++q) {
      m.token_ids.push_back(chained_token ? *chained_token : s->tokens[q]);
      m.positions.push_back(q);
      m.slot_mapping.push_back(slot_of(s, q, bs));
      const float* hq = h(q);
      mtp_h_in.insert(mtp_h_in.end(), hq, hq + E);
    }
    m.seqs.push_back(sm);
  };
  auto run = [&] {
    const size_t n = mtp_meta.token_ids.size();
    if (mtp_h_out.size() < n * E) mtp_h_out.resize(n * E);
    const size_t n_logits = mtp_meta.logits_rows.size() * static_cast<size_t>(n_vocab);
    if (mtp_logits.size() < n_logits) mtp_logits.resize(n_logits);
    const auto t0 = std::chrono::steady_clock::now();
    runner->forward_mtp(mtp_meta, mtp_h_in.data(), mtp_logits.data(), mtp_h_out.data());
    totals.mtp_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };

  // The rows that became computable: position q pairs the trunk's h at q - 1 with token q.
  begin_batch();
  drafting.clear();
  for (size_t i = 0; i < plan.items.size(); ++i) {
    Sequence* s = plan.items[i].seq;
    if (s->blocks.table.empty()) continue;  // ended by an error this step
    const bool finished = s->status == SeqStatus::kFinished;
    const int a = n_before[i], b = s->n_computed;
    const int32_t row0 = meta.seqs[i].query_start;  // the trunk row of position a
    auto h = [&, s, a, row0](int q) {
      return q - 1 == a - 1 ? s->pending_h.data() : hidden.data() + (row0 + q - 1 - a) * E;
    };
    const int q0 = std::max(s->mtp_valid + 1, 1);
    const int q1 = finished || s->mtp_hold ? b - 1 : b;
    if (q0 <= q1) {
      if (q0 < a || (q0 == a && s->pending_h.size() != E)) {
        // Cannot happen by construction (the rows before a step's first position are final).
        log().error("mtp: sequence of {} lacks the hidden state for position {}; it stops speculating", s->req->id,
                    q0 - 1);
        continue;
      }
      add_rows(s, q0, q1, nullptr, h);
      s->mtp_valid = q1;
      // Drafts only in the decode state: every token but the last one computed.
      const bool decoding = static_cast<int>(s->tokens.size()) == b + 1;
      const int n_draft = finished || q1 != b || !decoding ? 0 : draft_budget(s);
      if (n_draft > 0) {
        mtp_meta.logits_rows.push_back(static_cast<int32_t>(mtp_meta.token_ids.size()) - 1);
        drafting.push_back({s, static_cast<int>(mtp_meta.token_ids.size()) - 1, n_draft});
      }
    }
    if (s->mtp_valid < b) {  // the next step's first MTP row needs the trunk's h at b - 1
      const float* hb = hidden.data() + (row0 + b - 1 - a) * E;
      s->pending_h.assign(hb, hb + E);
    }
  }
  if (!mtp_meta.token_ids.empty()) run();
  for (size_t j = 0; j < drafting.size(); ++j)
    drafting[j].seq->drafts.assign(1, argmax_row(mtp_logits.data() + j * n_vocab, n_vocab));

  // Chained drafts: draft k + 1 from the MTP layer's own output at draft k.
  for (int k = 1; k < cfg.num_speculative_tokens; ++k) {
    std::swap(mtp_h_out, mtp_h_prev);  // the previous call's outputs are this call's h inputs
    begin_batch();
    size_t n_chain = 0;
    for (Drafting& d : drafting) {
      if (d.n_draft <= k) continue;
      Sequence* s = d.seq;
      const int q = s->n_computed + k;
      const float* hq = mtp_h_prev.data() + static_cast<size_t>(d.h_row) * E;
      add_rows(s, q, q, &s->drafts.back(), [hq](int) { return hq; });
      mtp_meta.logits_rows.push_back(static_cast<int32_t>(n_chain));
      d.h_row = static_cast<int>(n_chain++);
    }
    if (n_chain == 0) break;
    run();
    for (Drafting& d : drafting)
      if (d.n_draft > k)
        d.seq->drafts.push_back(argmax_row(mtp_logits.data() + static_cast<size_t>(d.h_row) * n_vocab, n_vocab));
  }

  // A request that forked this step: its siblings start from the first sequence's MTP state.
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

// Fills the token masks of the constrained sequences that sample in this step on the mask
// worker; the caller runs the forward pass meanwhile and then waits.
void Engine::Impl::start_masks(const SchedulerOutput& plan) {
  mask_jobs.clear();
  mask_of_item.assign(plan.items.size(), -1);
  for (size_t i = 0; i < plan.items.size(); ++i) {
    Sequence* s = plan.items[i].seq;
    if (!scheduled[i].needs_logits || !s->grammar) continue;
    mask_of_item[i] = static_cast<int>(mask_jobs.size());
    mask_jobs.push_back({s->grammar.get(), {}, false, {}});
  }
  if (mask_jobs.empty()) return;
  const size_t n_words = token_mask_words(n_vocab);
  if (mask_buf.size() < mask_jobs.size() * n_words) mask_buf.resize(mask_jobs.size() * n_words);
  for (size_t k = 0; k < mask_jobs.size(); ++k)
    mask_jobs[k].mask = std::span<uint32_t>(mask_buf.data() + k * n_words, n_words);
  mask_worker.submit(mask_jobs);
}

void Engine::Impl::sample_seq(Sequence* seq, const float* row, const MaskJob* mask, std::vector<Request*>& touched) {
  Request& r = *seq->req;
  touched.push_back(&r);
  if (mask && !mask->error.empty()) {
    finish_request(r, FinishReason::kError, fmt::format("request {}: grammar error: {}", r.id, mask->error));
    log().error("{}", r.error);
    return;
  }
  const std::span<const uint32_t> allowed =
      mask && mask->constrained ? std::span<const uint32_t>(mask->mask) : std::span<const uint32_t>();
  const bool fork_now = !r.forked && seq->index == 0;
  SampleResult res =
      sampler.sample(row, r.params, seq->penalties, seq->n_generated(), cfg.eos_token_ids, seq->rng, allowed);
  if (fork_now) {
    r.forked = true;
    seq->n_slots = 1;
    if (cfg.num_speculative_tokens > 0 && r.params.n > 1) {
      // Share only the blocks that hold the prompt, and hold the MTP row after it (each sibling's
      // differs) until each has its own copy of the block.
      kv.truncate(seq->blocks, seq->n_computed);
      seq->mtp_hold = true;
    }
    // Siblings share the prompt's blocks (copy-on-write of the partial last block happens when
    // one of them writes into it) and sample their first token from the same logits.
    for (int i = 1; i < r.params.n; ++i) {
      auto sib = std::make_unique<Sequence>();
      sib->req = &r;
      sib->index = i;
      sib->tokens = r.prompt;
      sib->n_prompt = seq->n_prompt;
      sib->n_computed = seq->n_computed;
      kv.fork(seq->blocks, sib->blocks);
      sib->rng = Rng(*r.params.seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i));
      sib->penalties.set_prompt(r.prompt);
      sib->output.start(decoder.get(), r.prompt, r.params);
      // A fresh matcher is in the same state as seq's before its first token: same mask.
      if (r.params.grammar) sib->grammar = std::make_unique<GrammarMatcher>(r.params.grammar);
      Sequence* s = sib.get();
      r.seqs.push_back(std::move(sib));
      sched.add_running(s);
      SampleResult sib_res = sampler.sample(row, r.params, s->penalties, 0, cfg.eos_token_ids, s->rng, allowed);
      append_token(s, sib_res);
    }
  }
  append_token(seq, res);
}

void Engine::Impl::emit(std::vector<Request*>& touched) {
  std::sort(touched.begin(), touched.end());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  std::vector<std::pair<Request*, RequestOutput>> ready;
  for (Request* r : touched) {
    RequestOutput out;
    out.request_id = r->id;
    out.n_prompt_tokens = static_cast<int>(r->prompt.size());
    out.n_cached_tokens = std::max(0, r->n_cached_tokens);
    out.error = r->error;
    out.error_status = r->error_status;
    for (auto& s : r->seqs)
      if (s->output.has_delta()) out.outputs.push_back(s->output.take_delta(s->index, s->n_generated()));
    std::sort(out.outputs.begin(), out.outputs.end(),
              [](const CompletionOutput& a, const CompletionOutput& b) { return a.index < b.index; });
    out.finished = r->aborted || r->n_finished == r->params.n;
    if (out.outputs.empty() && !out.finished) continue;
    ready.emplace_back(r, std::move(out));
  }
  // Deliver outside every lock; finished requests are forgotten first so that a callback may
  // reuse the id.
  std::vector<std::unique_ptr<Request>> done;
  for (auto& [r, out] : ready) {
    if (!out.finished) continue;
    ++totals.n_requests_finished;
    auto it = requests.find(r->id);
    done.push_back(std::move(it->second));
    requests.erase(it);
    std::lock_guard lk(mu);
    active_ids.erase(r->id);
  }
  update_counters();
  for (auto& [r, out] : ready) {
    if (r->on_output)
      r->on_output(std::move(out));
    else if (r->stream)
      r->stream->push(std::move(out));
  }
}

void Engine::Impl::update_counters() {
  EngineCounters c = totals;
  c.n_running = sched.n_running();
  c.n_waiting = sched.n_waiting();
  {
    std::lock_guard lk(mu);
    c.n_waiting += static_cast<int>(inbox_add.size());
  }
  c.n_kv_blocks = kv.pool().n_blocks();
  c.n_kv_blocks_free = kv.pool().n_free();
  c.kv_usage = 1.0 - static_cast<double>(c.n_kv_blocks_free) / static_cast<double>(c.n_kv_blocks);
  c.n_sparse_layer_tokens = runner->sparse_layer_tokens();
  c.n_sparse_selected_rows = runner->sparse_selected_rows();
  std::lock_guard lk(counters_mu);
  snapshot = c;
}

bool Engine::Impl::step() {
  std::vector<Request*> touched;
  drain_inbox(touched);
  SchedulerOutput plan = sched.schedule();
  for (Sequence* seq : plan.failed) {
    Request& r = *seq->req;
    finish_request(r, FinishReason::kError,
                   fmt::format("request {} needs {} tokens of KV cache but the cache holds {}", r.id,
                               seq->tokens.size(), runner->cache().n_slots()));
    log().error("{}", r.error);
    touched.push_back(&r);
  }
  totals.n_preemptions += plan.n_preempted;
  totals.n_prefix_queries += plan.n_prefix_query_tokens;
  totals.n_prefix_hits += plan.n_prefix_hit_tokens;
  if (plan.empty()) {
    const bool did = !touched.empty();
    emit(touched);
    return did;
  }

  for (const auto& c : plan.copies) runner->copy_block(c.src, c.dst);
  scheduled.clear();
  for (const auto& item : plan.items) {
    Sequence* s = item.seq;
    // A speculating sequence's drafts ride with its last token (taken off again after the forward).
    const bool verify = !s->drafts.empty();
    if (verify) s->tokens.insert(s->tokens.end(), s->drafts.begin(), s->drafts.end());
    scheduled.push_back({s->tokens, s->blocks.table, s->n_computed, item.n_new,
                         s->n_computed + item.n_new == static_cast<int>(s->tokens.size()), verify});
  }
  build_batch_meta(scheduled, kv.block_size(), cfg.path_policy, cfg.decode_threshold, cfg.all_logits, meta);
  const int n_rows = static_cast<int>(meta.logits_rows.size());
  if (logits.size() < static_cast<size_t>(n_rows) * n_vocab) logits.resize(static_cast<size_t>(n_rows) * n_vocab);
  start_masks(plan);
  const auto t_forward = std::chrono::steady_clock::now();
  const PathTokens paths_before = runner->path_tokens();
  try {
    if (cfg.num_speculative_tokens > 0) {
      const size_t n_hidden = static_cast<size_t>(meta.n_tokens()) * n_embd;
      if (hidden.size() < n_hidden) hidden.resize(n_hidden);
      runner->forward_hidden(meta, logits.data(), hidden.data());
    } else {
      runner->forward(meta, logits.data());
    }
  } catch (...) {
    mask_worker.wait();  // the worker still reads the matchers
    throw;
  }
  const auto t_forward_end = std::chrono::steady_clock::now();
  totals.forward_seconds += std::chrono::duration<double>(t_forward_end - t_forward).count();
  if (!mask_jobs.empty()) {
    mask_worker.wait();
    totals.mask_wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t_forward_end).count();
    totals.n_masks += static_cast<int64_t>(mask_jobs.size());
  }
  ++totals.n_steps;
  for (const ScheduledSeq& s : scheduled)
    if (s.verify) {
      ++totals.n_spec_steps;
      break;
    }
  // The paths the model actually sent this step's tokens down (its own count, after every override).
  const PathTokens paths_after = runner->path_tokens();
  totals.n_tokens_mha += paths_after.mha - paths_before.mha;
  totals.n_tokens_mqa += paths_after.mqa - paths_before.mqa;

  n_before.resize(plan.items.size());
  for (size_t i = 0; i < plan.items.size(); ++i) {
    Sequence* s = plan.items[i].seq;
    n_before[i] = s->n_computed;
    if (!scheduled[i].verify) s->n_computed += plan.items[i].n_new;  // verify: what is accepted
  }
  // logits_rows is ascending and grouped by sequence; a sequence samples from its last row, a
  // verifying one from each row in turn.
  size_t k = 0;
  for (size_t i = 0; i < plan.items.size(); ++i) {
    const SeqMeta& m = meta.seqs[i];
    Sequence* seq = plan.items[i].seq;
    if (scheduled[i].verify) {
      accept_drafts(seq, logits.data() + k * static_cast<size_t>(n_vocab), m.query_len, n_before[i], touched);
      k += m.query_len;
      continue;
    }
    const float* last = nullptr;
    for (; k < meta.logits_rows.size() && meta.logits_rows[k] < m.query_start + m.query_len; ++k) {
      const float* row = logits.data() + k * static_cast<size_t>(n_vocab);
      if (cfg.on_logits)
        cfg.on_logits(seq->req->id, seq->index, meta.positions[meta.logits_rows[k]],
                      std::span<const float>(row, n_vocab));
      last = row;
    }
    if (scheduled[i].needs_logits)
      sample_seq(seq, last, mask_of_item[i] >= 0 ? &mask_jobs[mask_of_item[i]] : nullptr, touched);
  }
  if (cfg.num_speculative_tokens > 0) run_mtp(plan);
  // Full blocks enter the prefix cache once both layers' rows in them are final.
  for (const auto& item : plan.items) {
    Sequence* s = item.seq;
    if (!s->blocks.table.empty()) kv.cache_full_blocks(s->blocks, s->tokens, s->n_computed);
  }
  flush_finished();
  emit(touched);
  return true;
}

void Engine::Impl::enqueue(std::unique_ptr<Request> req) {
  Request& r = *req;
  if (r.id.empty()) fail("request: id must not be empty");
  if (r.prompt.empty()) fail("request {}: the prompt has no tokens", r.id);
  for (size_t i = 0; i < r.prompt.size(); ++i)
    if (r.prompt[i] < 0 || r.prompt[i] >= n_vocab)
      fail("request {}: prompt token {} at position {} is out of range [0, {})", r.id, r.prompt[i], i, n_vocab);
  if (static_cast<int64_t>(r.prompt.size()) >= cfg.max_model_len)
    fail(
        "request {}: the prompt has {} tokens; the limit is {} (max model length {}, one "
        "token is left for the output)",
        r.id, r.prompt.size(), cfg.max_model_len - 1, cfg.max_model_len);
  r.params.validate(n_vocab);
  if (r.params.n > cfg.max_num_seqs)
    fail("request {}: n = {} is more than max-num-seqs = {}", r.id, r.params.n, cfg.max_num_seqs);
  if (!r.params.seed) r.params.seed = std::random_device{}() * 0x100000001ull ^ std::random_device{}();
  {
    std::lock_guard lk(mu);
    if (!active_ids.insert(r.id).second) fail("request {}: the id is already in use", r.id);
    inbox_add.push_back(std::move(req));
  }
  wake.notify_all();
}

void Engine::Impl::run_loop() {
  for (;;) {
    {
      std::unique_lock lk(mu);
      wake.wait(lk, [&] { return stop_requested || !inbox_add.empty() || !inbox_abort.empty() || !sched.idle(); });
      if (stop_requested) return;
    }
    try {
      step();
    } catch (const std::exception& e) {
      // A failing forward leaves the step's state unknown: end every request with the error.
      log().error("engine step failed: {}", e.what());
      flush_finished();
      const bool unavailable = dynamic_cast<const UnavailableError*>(&e) != nullptr;
      std::vector<Request*> touched;
      for (auto& [id, r] : requests) {
        if (r->aborted) continue;
        finish_request(*r, FinishReason::kError, fmt::format("engine error: {}", e.what()));
        if (unavailable) r->error_status = 503;
        touched.push_back(r.get());
      }
      emit(touched);
    }
  }
}

Engine::Engine(std::unique_ptr<ModelRunner> runner, EngineConfig config, std::shared_ptr<const TextDecoder> decoder)
    : impl_(std::make_unique<Impl>(std::move(runner), std::move(config), std::move(decoder))) {}

Engine::~Engine() {
  stop();
  // Whatever is still active ends with abort so that no stream waits forever.
  std::vector<Request*> touched;
  impl_->drain_inbox(touched);
  for (auto& [id, r] : impl_->requests) {
    if (r->aborted) continue;
    impl_->finish_request(*r, FinishReason::kAbort, "");
    touched.push_back(r.get());
  }
  impl_->emit(touched);
}

std::shared_ptr<RequestStream> Engine::add_request(std::string id, std::vector<int32_t> prompt, SamplingParams params) {
  auto req = std::make_unique<Request>();
  req->id = std::move(id);
  req->prompt = std::move(prompt);
  req->params = std::move(params);
  req->stream = std::make_shared<RequestStream>();
  auto stream = req->stream;
  impl_->enqueue(std::move(req));
  return stream;
}

void Engine::add_request(std::string id, std::vector<int32_t> prompt, SamplingParams params, OutputCallback on_output) {
  auto req = std::make_unique<Request>();
  req->id = std::move(id);
  req->prompt = std::move(prompt);
  req->params = std::move(params);
  req->on_output = std::move(on_output);
  impl_->enqueue(std::move(req));
}

bool Engine::abort(const std::string& id) {
  {
    std::lock_guard lk(impl_->mu);
    if (!impl_->active_ids.count(id)) return false;
    impl_->inbox_abort.push_back(id);
  }
  impl_->wake.notify_all();
  return true;
}

EngineCounters Engine::counters() const {
  std::lock_guard lk(impl_->counters_mu);
  return impl_->snapshot;
}

const EngineConfig& Engine::config() const { return impl_->cfg; }
int Engine::n_vocab() const { return impl_->n_vocab; }

bool Engine::has_unfinished() const {
  std::lock_guard lk(impl_->mu);
  return !impl_->active_ids.empty();
}

void Engine::start() {
  if (impl_->loop.joinable()) return;
  {
    std::lock_guard lk(impl_->mu);
    impl_->stop_requested = false;
  }
  impl_->loop = std::thread([this] { impl_->run_loop(); });
}

void Engine::stop() {
  if (!impl_->loop.joinable()) return;
  {
    std::lock_guard lk(impl_->mu);
    impl_->stop_requested = true;
  }
  impl_->wake.notify_all();
  impl_->loop.join();
}

bool Engine::step() { return impl_->step(); }

void Engine::set_speculative_tokens(int k) {
  Impl& m = *impl_;
  if (k < 0 || k > m.configured_spec) fail("engine: speculative tokens {} outside 0..{}", k, m.configured_spec);
  if (has_unfinished()) fail("engine: speculation can change only while no request is active");
  if (m.cfg.enable_prefix_caching && k != m.configured_spec)
    fail("engine: speculation can be switched off only with prefix caching off");
  m.cfg.num_speculative_tokens = k;
  m.sched.configure_speculation(k, m.cfg.max_model_len);
}

void Engine::run_until_idle() {
  while (has_unfinished()) impl_->step();
}

ModelRunner& Engine::runner() { return *impl_->runner; }
const kv::KvManager& Engine::kv() const { return impl_->kv; }

}  // namespace mla
