// One generation request in flight (see generation_job.h).
#include "server/generation_job.h"

#include <fmt/format.h>

#include "server/sse.h"
#include "util/error.h"

namespace mla::server {

void JobRegistry::add(const std::string& id, const std::shared_ptr<GenerationJob>& job) {
  std::lock_guard lk(mu_);
  jobs_.emplace(id, job);
}

void JobRegistry::remove(const std::string& id) {
  std::lock_guard lk(mu_);
  jobs_.erase(id);
}

int JobRegistry::size() const {
  std::lock_guard lk(mu_);
  return static_cast<int>(jobs_.size());
}

void JobRegistry::abort_all() {
  std::vector<std::shared_ptr<GenerationJob>> jobs;
  {
    std::lock_guard lk(mu_);
    for (auto& [id, w] : jobs_)
      if (auto j = w.lock()) jobs.push_back(std::move(j));
  }
  for (auto& j : jobs) j->abort();
}

// ---------------------------------------------------------------------------------------------

void GenerationJob::start(JobServices services, std::shared_ptr<HttpResponder> res, JobRequest req,
                          std::unique_ptr<ResponseWriter> writer) {
  // The engine's own validation, with its message, before anything is queued.
  try {
    req.params.validate(services.engine.n_vocab());
  } catch (const Error& e) {
    bad_request(e.what());
  }
  std::vector<int> lens;
  for (const auto& p : req.prompts) lens.push_back(static_cast<int>(p.size()));
  auto job = std::make_shared<GenerationJob>(services, std::move(res), req.id, req.stream, req.params.n,
                                             std::move(lens), std::move(writer));
  services.jobs.add(req.id, job);
  job->add_requests(std::move(req.prompts), req.params);
}

GenerationJob::GenerationJob(JobServices services, std::shared_ptr<HttpResponder> res, std::string id, bool stream,
                             int n, std::vector<int> prompt_lens, std::unique_ptr<ResponseWriter> writer)
    : services_(services),
      res_(std::move(res)),
      id_(std::move(id)),
      stream_(stream),
      n_(n),
      prompt_lens_(std::move(prompt_lens)),
      writer_(std::move(writer)) {
  choices_.resize(prompt_lens_.size() * static_cast<size_t>(n_));
  prompts_.resize(prompt_lens_.size());
}

std::string GenerationJob::engine_id(size_t prompt) const {
  return prompt_lens_.size() == 1 ? id_ : fmt::format("{}-{}", id_, prompt);
}

void GenerationJob::add_requests(std::vector<std::vector<int32_t>> prompts, const SamplingParams& params) {
  auto self = shared_from_this();
  for (size_t p = 0; p < prompts.size(); ++p) {
    try {
      services_.engine.add_request(engine_id(p), std::move(prompts[p]), params,
                                   [self, p](RequestOutput&& out) { self->on_output(p, std::move(out)); });
    } catch (const Error& e) {
      fail_start(p, ApiError(400, e.what()));
      return;
    }
  }
  begin();
  // Registered after the requests exist, so an early disconnect aborts them all.
  std::weak_ptr<GenerationJob> weak = self;
  res_->on_disconnect([weak] {
    if (auto j = weak.lock()) j->abort();
  });
}

int64_t GenerationJob::prompt_tokens() const {
  int64_t n = 0;
  for (int len : prompt_lens_) n += len;
  return n;
}

void GenerationJob::begin() {
  std::lock_guard lk(mu_);
  if (begun_ || failed_) return;
  begun_ = true;
  if (stream_) {
    res_->start_stream("text/event-stream", {{"Cache-Control", "no-cache"}});
    Events head;
    write_head(head);
    for (auto& e : head) res_->write(std::move(e));
  }
  for (auto& e : pending_) res_->write(std::move(e));
  pending_.clear();
  if (pending_end_) res_->end_stream();
}

void GenerationJob::write_head(Events& out) {
  if (!stream_ || head_written_) return;
  head_written_ = true;
  writer_->stream_head(prompt_tokens(), out);
}

void GenerationJob::emit(Events& events) {
  for (auto& e : events) {
    if (begun_)
      res_->write(std::move(e));
    else
      pending_.push_back(std::move(e));
  }
  events.clear();
}

void GenerationJob::emit_end() {
  if (begun_)
    res_->end_stream();
  else
    pending_end_ = true;
}

void GenerationJob::observe(size_t p, const RequestOutput& out, Clock::time_point now) {
  auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  ServerMetrics& metrics = services_.metrics;
  for (const auto& o : out.outputs) {
    if (o.token_ids.empty() || o.index < 0 || o.index >= n_) continue;
    Choice& c = choices_[p * n_ + o.index];
    if (!prompts_[p].first_token_seen) {
      prompts_[p].first_token_seen = true;
      metrics.observe_ttft(seconds(now - start_));
    }
    // Time per output token: the gap since the sequence's previous output, shared by the
    // tokens of this delta (the first token of a sequence counts toward TTFT instead).
    const size_t k = o.token_ids.size() - (c.last_token == Clock::time_point{} ? 1 : 0);
    if (k > 0) {
      const auto since = c.last_token == Clock::time_point{} ? start_ : c.last_token;
      const double per = seconds(now - since) / static_cast<double>(k);
      for (size_t i = 0; i < k; ++i) metrics.observe_tpot(per);
    }
    c.last_token = now;
  }
  if (out.finished) metrics.observe_e2e(seconds(now - start_));
}

void GenerationJob::on_output(size_t p, RequestOutput&& out) {
  std::lock_guard lk(mu_);
  if (done_ || p >= prompts_.size() || prompts_[p].finished) return;
  const auto now = Clock::now();
  Events events;
  // Output that arrives before begin() is held; the head goes first in either case.
  if (!failed_ && !out.outputs.empty()) write_head(events);
  if (!failed_ && !out.prompt_logprobs.empty()) writer_->prompt_logprobs(p, std::move(out.prompt_logprobs));
  prompts_[p].cached_tokens = out.n_cached_tokens;
  for (const auto& o : out.outputs) {
    if (o.index < 0 || o.index >= n_) continue;
    const size_t ci = p * n_ + o.index;
    Choice& c = choices_[ci];
    c.state.n_generated = o.n_generated;
    if (o.finish_reason) {
      c.state.finish = o.finish_reason;
      c.state.stop_reason = o.stop_reason;
    }
    if (!failed_) writer_->output(ci, o, !c.started, events);
    c.started = true;
  }
  emit(events);
  if (!out.error.empty() && error_.empty()) {
    error_ = out.error;
    error_status_ = out.error_status;
  }
  observe(p, out, now);
  if (out.finished) {
    prompts_[p].finished = true;
    if (++n_finished_ == prompts_.size()) finish_all();
  }
}

void GenerationJob::finish_all() {
  done_ = true;
  if (!failed_) {
    JobUsage usage{prompt_tokens(), 0, 0};
    for (const auto& p : prompts_) usage.cached_tokens += p.cached_tokens;
    std::vector<ChoiceState> states;
    for (const auto& c : choices_) {
      usage.completion_tokens += c.state.n_generated;
      states.push_back(c.state);
    }
    Events events;
    if (!error_.empty()) {
      const ApiError err(error_status_, "generation failed: " + error_, "", "engine_error");
      if (stream_) {
        writer_->stream_error(err, events);
        emit(events);
        emit_end();
      } else {
        res_->send(err.status(), "application/json", dump_json(writer_->error_json(err)));
      }
    } else if (stream_) {
      writer_->stream_end(states, usage, events);
      emit(events);
      emit_end();
    } else {
      res_->send(200, "application/json", dump_json(writer_->body(states, usage)));
    }
  }
  services_.jobs.remove(id_);
}

void GenerationJob::abort() {
  std::vector<std::string> ids;
  {
    std::lock_guard lk(mu_);
    if (done_) return;
    for (size_t p = 0; p < prompts_.size(); ++p)
      if (!prompts_[p].finished) ids.push_back(engine_id(p));
  }
  for (const auto& id : ids) services_.engine.abort(id);
}

void GenerationJob::fail_start(size_t failed_at, const ApiError& err) {
  {
    std::lock_guard lk(mu_);
    failed_ = true;
    // The prompts never added will not report: count them as finished.
    for (size_t p = failed_at; p < prompts_.size(); ++p)
      if (!prompts_[p].finished) prompts_[p].finished = true, ++n_finished_;
    // Nothing was sent yet (begin() was not called): a plain error response, streaming or not.
    res_->send(err.status(), "application/json", dump_json(writer_->error_json(err)));
    if (n_finished_ == prompts_.size()) {
      done_ = true;
      services_.jobs.remove(id_);
      return;
    }
  }
  for (size_t p = 0; p < failed_at; ++p) services_.engine.abort(engine_id(p));
}

}  // namespace mla::server
