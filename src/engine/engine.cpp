// The engine loop: inbox (add/abort from any thread) → scheduler → BatchMeta → model forward →
// sampler (and speculative acceptance) → stop checks and text → per-request outputs.
#include "engine/engine.h"

#include <algorithm>
#include <cassert>
#include <random>

#include "engine/engine_impl.h"
#include "grammar/token_mask.h"
#include "util/error.h"
#include "util/log.h"

namespace mla {

Engine::Impl::Impl(std::unique_ptr<ModelRunner> r, EngineConfig c, std::shared_ptr<const TextDecoder> d)
    : runner(std::move(r)),
      cfg(std::move(c)),
      decoder(std::move(d)),
      n_vocab(runner->n_vocab()),
      kv(runner->kv_blocks(), runner->kv_block_size(), cfg.enable_prefix_caching),
      sched({.max_num_batched_tokens = cfg.max_num_batched_tokens,
             .max_num_seqs = cfg.max_num_seqs,
             .max_prompt_logits_rows = cfg.max_prompt_logits_rows,
             // A forced path runs every token the same way, whatever its phase.
             .cache_generated_blocks = !runner->rows_depend_on_phase() || cfg.path_policy != MlaPathPolicy::Auto},
            kv),
      sampler(n_vocab),
      spec(*runner, cfg, kv, n_vocab) {
  if (cfg.max_num_batched_tokens < 1)
    fail("engine: max-num-batched-tokens must be >= 1, got {}", cfg.max_num_batched_tokens);
  if (cfg.max_num_seqs < 1) fail("engine: max-num-seqs must be >= 1, got {}", cfg.max_num_seqs);
  if (cfg.decode_threshold < 1) fail("engine: decode threshold must be >= 1, got {}", cfg.decode_threshold);
  if (const MlaPathPolicy loaded = runner->loaded_path_policy();
      loaded != MlaPathPolicy::Auto && cfg.path_policy != loaded)
    fail("engine: mla path {} needs weights the model did not load: it was loaded for mla path {} only",
         mla_path_policy_name(cfg.path_policy), mla_path_policy_name(loaded));
  if (cfg.max_prompt_logits_rows < 1)
    fail("engine: max prompt logits rows must be >= 1, got {}", cfg.max_prompt_logits_rows);
  for (int32_t t : cfg.eos_token_ids)
    if (t < 0 || t >= n_vocab) fail("engine: EOS token {} out of range [0, {})", t, n_vocab);
  if (!runner->paged_cache() && cfg.enable_prefix_caching)
    fail("engine: prefix caching needs a paged cache; this model keeps each sequence's cache state apart");
  if (!runner->paged_cache() && cfg.kv_tiers.enabled())
    fail("engine: the kv cache tiers need a paged cache; this model keeps each sequence's cache state apart");
  const int64_t capacity = int64_t{kv.pool().n_blocks()} * kv.block_size();
  int64_t max_len = cfg.max_model_len > 0 ? cfg.max_model_len : runner->max_context();
  if (max_len > capacity) {
    log().info("max model length {} capped to the KV cache capacity of {} tokens", max_len, capacity);
    max_len = capacity;
  }
  if (max_len < 2) fail("engine: max model length {} leaves no room to generate", max_len);
  cfg.max_model_len = static_cast<int>(max_len);
  spec.start();
  if (cfg.kv_tiers.enabled() && cfg.enable_prefix_caching) {
    const LatentCache& c = runner->cache();
    tiers = std::make_unique<kv::TierStore>(
        cfg.kv_tiers, kv::tier_fingerprint(runner->cache_identity(), c.shape(), c.dtype(), c.block_size()),
        c.block_size(), c.block_bytes());
    kv.set_tiers(tiers.get());
    log().info("kv cache tiers: host RAM {:.1f} MiB, disk {} (fingerprint {:016x}, {:.2f} MiB a block)",
               static_cast<double>(cfg.kv_tiers.host_bytes) / 1048576.0,
               tiers->has_disk() ? tiers->disk_dir() : std::string("off"), tiers->fingerprint(),
               static_cast<double>(c.block_bytes()) / 1048576.0);
  } else if (cfg.kv_tiers.enabled()) {
    log().warn("kv cache tiers: off, because prefix caching is off");
  }
  sched.configure_speculation(cfg.num_speculative_tokens, cfg.max_model_len);
  // A model with a per-sequence state of its own (deepseek4) has no MLA paths to tell of.
  const bool auto_paths = runner->paged_cache() && cfg.path_policy == MlaPathPolicy::Auto;
  if (auto_paths && runner->rows_depend_on_phase())
    log().info("mla path auto: prompt tokens down {}, generated tokens down mqa (by phase, whatever the chunking)",
               mla_path_name(runner->auto_prefill_path()));
  else if (auto_paths)
    log().info("mla path auto: query length <= {} down mqa, longer (prefill chunks) down {}", cfg.decode_threshold,
               mla_path_name(runner->auto_prefill_path()));
  logits.resize(static_cast<size_t>(cfg.all_logits ? cfg.max_num_batched_tokens : cfg.max_num_seqs) * n_vocab);
  update_counters();
}

void Engine::Impl::admit(std::unique_ptr<Request> req) {
  Request* r = req.get();
  // A request that queues behind others has its prefix's disk blocks read meanwhile.
  if (tiers && (sched.n_waiting() > 0 || sched.n_running() >= cfg.max_num_seqs)) kv.prefetch_prefix(r->prompt);
  sched.add_waiting(&new_sequence(*r, 0));
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
    remove_sequence(s.get());
    ++req.n_finished;
  }
  // Before the fork the other n - 1 sequences do not exist yet; they end with it.
  if (!req.forked) {
    for (int i = 1; i < req.params.n; ++i) {
      Sequence& s = new_sequence(req, i);
      s.status = SeqStatus::kFinished;
      s.output.finish_external(reason);
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
  for (Sequence* s : finished_pending) remove_sequence(s);
  finished_pending.clear();
}

Sequence& Engine::Impl::new_sequence(Request& r, int index) {
  Sequence& s = r.add_sequence(index, decoder.get());
  s.id = ++last_seq_id;
  return s;
}

void Engine::Impl::remove_sequence(Sequence* s) {
  sched.remove(s);
  runner->release_sequence(s->id);
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
  if (r.params.max_tokens == 0) {
    finish_unsampled(seq);
    return;
  }
  const bool fork_now = !r.forked && seq->index == 0;
  SampleResult res =
      sampler.sample(row, r.params, seq->penalties, seq->n_generated(), cfg.eos_token_ids, seq->rng, allowed);
  if (fork_now) fork(seq, row, allowed);
  append_token(seq, res);
}

void Engine::Impl::finish_unsampled(Sequence* seq) {
  Request& r = *seq->req;
  auto end = [&r](Sequence& s) {
    s.output.finish_external(FinishReason::kLength);
    s.status = SeqStatus::kFinished;
    ++r.n_finished;
  };
  end(*seq);
  finished_pending.push_back(seq);  // its blocks stay until the step's end, for the prefix cache
  if (!r.forked) {
    r.forked = true;
    for (int i = 1; i < r.params.n; ++i) end(new_sequence(r, i));
  }
}

void Engine::Impl::add_prompt_logprob(Sequence& seq, int position, const float* row) {
  Request& r = *seq.req;
  // A preempted sequence recomputes rows it has already scored.
  if (position + 1 >= seq.n_prompt || position != static_cast<int>(r.prompt_logprobs.size())) return;
  r.prompt_logprobs.push_back(sampler.token_logprobs(row, seq.tokens[position + 1], *r.params.prompt_logprobs));
}

void Engine::Impl::fork(Sequence* seq, const float* row, std::span<const uint32_t> allowed) {
  Request& r = *seq->req;
  r.forked = true;
  seq->n_slots = 1;
  spec.on_fork(*seq);
  // Siblings share the prompt's blocks (copy-on-write of the partial last block happens when
  // one of them writes into it) and sample their first token from the same logits. A fresh
  // grammar matcher is in the same state as seq's before its first token: same mask. A runner
  // that keeps per-sequence state copies the parent's for each sibling, so a sibling takes blocks
  // of its own (the pool accounts the copy) or, when none are free, waits to compute its tokens
  // from position 0.
  std::vector<kv::BlockCopy> no_copies;  // fresh blocks: nothing to copy
  for (int i = 1; i < r.params.n; ++i) {
    Sequence& sib = new_sequence(r, i);
    if (runner->paged_cache()) {
      sib.n_computed = seq->n_computed;
      kv.fork(seq->blocks, sib.blocks);
      sched.add_running(&sib);
    } else if (kv.allocate(sib.blocks, 0, seq->n_computed, nullptr, no_copies)) {
      sib.n_computed = seq->n_computed;
      runner->fork_sequence(seq->id, sib.id);
      sched.add_running(&sib);
    } else {
      sched.add_waiting(&sib);
    }
    SampleResult sib_res = sampler.sample(row, r.params, sib.penalties, 0, cfg.eos_token_ids, sib.rng, allowed);
    append_token(&sib, sib_res);
  }
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
    const bool prompt_logprobs_now = r->params.prompt_logprobs && !r->prompt_logprobs_sent && !r->aborted &&
                                     r->prompt_logprobs.size() + 1 >= r->prompt.size();
    if (prompt_logprobs_now) {
      out.prompt_logprobs = std::move(r->prompt_logprobs);
      r->prompt_logprobs_sent = true;
    }
    for (auto& s : r->seqs)
      if (s->output.has_delta()) out.outputs.push_back(s->output.take_delta(s->index, s->n_generated()));
    std::sort(out.outputs.begin(), out.outputs.end(),
              [](const CompletionOutput& a, const CompletionOutput& b) { return a.index < b.index; });
    out.finished = r->aborted || r->n_finished == r->params.n;
    if (out.outputs.empty() && !out.finished && !prompt_logprobs_now) continue;
    ready.emplace_back(r, std::move(out));
  }
  // Deliver outside every lock; finished requests are forgotten first so that a callback may
  // reuse the id.
  std::vector<std::unique_ptr<Request>> done;
  for (auto& [r, out] : ready) {
    if (!out.finished) continue;
    ++totals.n_requests_finished;
    count_finish_reason(*r);
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

void Engine::Impl::count_finish_reason(const Request& r) {
  std::optional<FinishReason> reason;
  for (const auto& s : r.seqs)
    if (s->index == 0) reason = s->output.finish_reason();
  switch (reason.value_or(FinishReason::kAbort)) {
    case FinishReason::kStop:
      ++totals.n_finished_stop;
      break;
    case FinishReason::kLength:
      ++totals.n_finished_length;
      break;
    case FinishReason::kAbort:
      ++totals.n_finished_abort;
      break;
    case FinishReason::kError:
      ++totals.n_finished_error;
      break;
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
  c.expert_cache_slots = runner->expert_cache_slots();
  if (c.expert_cache_slots > 0) {
    const ExpertCacheCounters e = runner->expert_cache_counters();
    c.n_expert_cache_hits = e.hits;
    c.n_expert_cache_misses = e.misses;
    c.expert_cache_bytes_read = e.bytes_read;
    c.expert_cache_stall_seconds = e.stall_seconds;
    c.n_expert_cache_read_ahead = e.read_ahead;
    c.expert_cache_read_ahead_bytes = e.read_ahead_bytes;
    c.n_expert_cache_predictions = e.predictions;
    c.n_expert_cache_predictions_used = e.predictions_used;
    c.n_expert_cache_predictable_uses = e.predictable_uses;
  }
  if (tiers) {
    const kv::TierCounters t = tiers->counters();
    c.n_tier_host_hits = t.hits[0];
    c.n_tier_host_misses = t.misses[0];
    c.n_tier_disk_hits = t.hits[1];
    c.n_tier_disk_misses = t.misses[1];
    c.tier_disk_bytes_read = t.bytes_read;
    c.tier_disk_bytes_written = t.bytes_written;
    c.n_tier_tokens_loaded = kv.tier_loads().tokens;
    c.n_tier_writes_dropped = t.writes_dropped;
    c.n_tier_write_errors = t.write_errors;
    c.n_tier_files_rejected = t.files_rejected;
    c.tier_host_bytes_used = t.host_bytes_used;
    c.tier_disk_bytes_used = t.disk_bytes_used;
  }
  spec.write_counters(c);
  std::lock_guard lk(counters_mu);
  snapshot = c;
}

bool Engine::Impl::step() {
  std::vector<Request*> touched;
  drain_inbox(touched);
  const SchedulerOutput plan = schedule(touched);
  if (plan.empty()) {
    const bool did = !touched.empty();
    emit(touched);
    return did;
  }
  build_batch(plan);
  run_forward();
  sched.on_forward_done(plan);
  sample(plan, touched);
  update(plan, touched);
  return true;
}

// The scheduler's plan for this step; requests that cannot fit the cache end with an error.
SchedulerOutput Engine::Impl::schedule(std::vector<Request*>& touched) {
  SchedulerOutput plan = sched.schedule();
  for (Sequence* seq : plan.failed) {
    Request& r = *seq->req;
    finish_request(r, FinishReason::kError,
                   fmt::format("request {} needs {} tokens of KV cache but the cache holds {}", r.id,
                               seq->tokens.size(), int64_t{kv.pool().n_blocks()} * kv.block_size()));
    log().error("{}", r.error);
    touched.push_back(&r);
  }
  totals.n_preemptions += plan.n_preempted;
  for (Sequence* seq : plan.preempted) runner->release_sequence(seq->id);
  totals.n_prefix_queries += plan.n_prefix_query_tokens;
  totals.n_prefix_hits += plan.n_prefix_hit_tokens;
  return plan;
}

// The block copies, the model's BatchMeta and the logits buffer for the plan; the grammar masks
// start filling on their worker.
void Engine::Impl::build_batch(const SchedulerOutput& plan) {
  int n_loads = 0;
  for (const auto& c : plan.copies) {
    if (c.load) {
      runner->load_block(c.dst, c.load->payload.data());
      ++n_loads;
    } else {
      runner->copy_block(c.src, c.dst);
    }
  }
  if (n_loads > 0) log().debug("kv tiers: {} block(s) loaded into the KV cache for this step", n_loads);
  scheduled.clear();
  for (const auto& item : plan.items) {
    Sequence* s = item.seq;
    if (item.verify) Speculator::append_drafts(*s);
    scheduled.push_back({s->tokens, s->blocks.table, s->n_computed, item.n_new,
                         s->n_computed + item.n_new == static_cast<int>(s->tokens.size()), item.verify,
                         s->wants_prompt_logits(), s->n_prompt, s->id});
  }
  build_batch_meta(scheduled, kv.block_size(), cfg.path_policy, cfg.decode_threshold, cfg.all_logits, meta);
  const int n_rows = static_cast<int>(meta.logits_rows.size());
  if (logits.size() < static_cast<size_t>(n_rows) * n_vocab) logits.resize(static_cast<size_t>(n_rows) * n_vocab);
  start_masks(plan);
}

// The model's forward over the batch, then the grammar masks it overlapped with.
void Engine::Impl::run_forward() {
  const auto t_forward = std::chrono::steady_clock::now();
  const PathTokens paths_before = runner->path_tokens();
  try {
    if (spec.active())
      spec.forward(meta, logits.data());
    else
      runner->forward(meta, logits.data());
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
  // The paths the model actually sent this step's tokens down (its own count, after every override).
  const PathTokens paths_after = runner->path_tokens();
  totals.n_tokens_mha += paths_after.mha - paths_before.mha;
  totals.n_tokens_mqa += paths_after.mqa - paths_before.mqa;
}

// logits_rows is ascending and grouped by sequence; a sequence samples from its last row, a
// verifying one has each of its rows judged in turn.
void Engine::Impl::sample(const SchedulerOutput& plan, std::vector<Request*>& touched) {
  const Speculator::AppendToken append = [this](Sequence& s, const SampleResult& res) { append_token(&s, res); };
  size_t k = 0;
  for (size_t i = 0; i < plan.items.size(); ++i) {
    const SeqMeta& m = meta.seqs[i];
    Sequence* seq = plan.items[i].seq;
    if (plan.items[i].verify) {
      touched.push_back(seq->req);
      spec.accept(*seq, logits.data() + k * static_cast<size_t>(n_vocab), m.query_len, plan.items[i].n_computed,
                  sampler, append);
      k += m.query_len;
      continue;
    }
    const float* last = nullptr;
    if (scheduled[i].prompt_logits) touched.push_back(seq->req);
    for (; k < meta.logits_rows.size() && meta.logits_rows[k] < m.query_start + m.query_len; ++k) {
      const float* row = logits.data() + k * static_cast<size_t>(n_vocab);
      const int position = meta.positions[meta.logits_rows[k]];
      if (cfg.on_logits) cfg.on_logits(seq->req->id, seq->index, position, std::span<const float>(row, n_vocab));
      if (scheduled[i].prompt_logits) add_prompt_logprob(*seq, position, row);
      last = row;
    }
    if (scheduled[i].needs_logits)
      sample_seq(seq, last, mask_of_item[i] >= 0 ? &mask_jobs[mask_of_item[i]] : nullptr, touched);
  }
}

// After sampling: the MTP rows and next drafts, then full blocks into the prefix cache (both
// layers' rows in them are final now), finished sequences' blocks freed, outputs delivered.
void Engine::Impl::update(const SchedulerOutput& plan, std::vector<Request*>& touched) {
  if (spec.active()) spec.draft(plan, meta);
  sched.on_step_done(plan);
  store_new_blocks();
  flush_finished();
  emit(touched);
}

// Write-through: a block the arena caches for the first time is copied out (its rows are final
// and stay until the next forward) and handed to the tiers, which keep it in RAM and queue it for
// the disk writer.
void Engine::Impl::store_new_blocks() {
  if (!tiers) return;
  const LatentCache& cache = runner->cache();
  for (kv::NewCachedBlock& n : kv.take_new_blocks()) {
    auto b = std::make_shared<kv::TierBlock>();
    b->hash = n.hash;
    b->parent_hash = n.parent_hash;
    b->tokens = std::move(n.tokens);
    b->payload.resize(static_cast<size_t>(cache.block_bytes()));
    cache.read_block(n.block, b->payload.data());
    tiers->put(std::move(b));
  }
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
  const int configured = m.spec.configured();
  if (k < 0 || k > configured) fail("engine: speculative tokens {} outside 0..{}", k, configured);
  if (has_unfinished()) fail("engine: speculation can change only while no request is active");
  if (m.cfg.enable_prefix_caching && k != configured)
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
