#include "server/generation_job.h"

#include <fmt/format.h>

#include "engine/engine.h"
#include "server/openai_api.h"
#include "server/sse.h"
#include "util/log.h"

namespace mla::server {

GenerationJob::GenerationJob(OpenAiApi& api, std::shared_ptr<HttpResponder> res, Options opt,
                             std::vector<std::string> prompt_texts, std::vector<int> prompt_lens)
    : api_(api),
      res_(std::move(res)),
      opt_(std::move(opt)),
      prompt_texts_(std::move(prompt_texts)),
      prompt_lens_(std::move(prompt_lens)) {
  choices_.resize(prompt_lens_.size() * static_cast<size_t>(opt_.n));
  prompts_.resize(prompt_lens_.size());
  if (opt_.echo)
    for (size_t ci = 0; ci < choices_.size(); ++ci) choices_[ci].text_offset = utf8_length(prompt_texts_[ci / opt_.n]);
}

std::string GenerationJob::engine_id(size_t prompt) const {
  return prompt_lens_.size() == 1 ? opt_.id : fmt::format("{}-{}", opt_.id, prompt);
}

void GenerationJob::begin() {
  std::lock_guard lk(mu_);
  if (begun_ || failed_) return;
  begun_ = true;
  if (opt_.stream) res_->start_stream("text/event-stream", {{"Cache-Control", "no-cache"}});
  for (auto& b : pending_) res_->write(std::move(b));
  pending_.clear();
  if (pending_end_) res_->end_stream();
}

void GenerationJob::emit(std::string bytes) {
  if (begun_)
    res_->write(std::move(bytes));
  else
    pending_.push_back(std::move(bytes));
}

void GenerationJob::emit_end() {
  if (begun_)
    res_->end_stream();
  else
    pending_end_ = true;
}

json GenerationJob::chunk_base() const {
  const bool chat = opt_.kind == Kind::kChat;
  const char* object = chat ? (opt_.stream ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return {{"id", opt_.id}, {"object", object}, {"created", opt_.created}, {"model", api_.config().served_model_name}};
}

void GenerationJob::observe(size_t p, const RequestOutput& out, Clock::time_point now) {
  auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  for (const auto& o : out.outputs) {
    if (o.token_ids.empty()) continue;
    Choice& c = choices_[p * opt_.n + o.index];
    if (!prompts_[p].first_token_seen) {
      prompts_[p].first_token_seen = true;
      api_.metrics().observe_ttft(seconds(now - start_));
    }
    // Time per output token: the gap since the sequence's previous output, shared by the
    // tokens of this delta (the first token of a sequence counts toward TTFT instead).
    const size_t k = o.token_ids.size() - (c.last_token == Clock::time_point{} ? 1 : 0);
    if (k > 0) {
      const auto since = c.last_token == Clock::time_point{} ? start_ : c.last_token;
      const double per = seconds(now - since) / static_cast<double>(k);
      for (size_t i = 0; i < k; ++i) api_.metrics().observe_tpot(per);
    }
    c.last_token = now;
  }
  if (out.finished) {
    api_.metrics().observe_e2e(seconds(now - start_));
    const Choice& first = choices_[p * opt_.n];
    api_.metrics().count_finished(first.finish.value_or(FinishReason::kAbort));
  }
}

void GenerationJob::on_output(size_t p, RequestOutput&& out) {
  std::lock_guard lk(mu_);
  if (done_ || p >= prompts_.size() || prompts_[p].finished) return;
  const auto now = Clock::now();
  const TokenTextFn token_text = [this](int32_t id) { return api_.token_text(id); };
  for (const auto& o : out.outputs) {
    if (o.index < 0 || o.index >= opt_.n) continue;
    const size_t ci = p * opt_.n + o.index;
    Choice& c = choices_[ci];
    std::string prefix;
    if (opt_.echo && !c.started && opt_.kind == Kind::kCompletion) prefix = prompt_texts_[p];
    c.n_generated = o.n_generated;
    if (o.finish_reason) {
      c.finish = o.finish_reason;
      c.stop_reason = o.stop_reason;
    }
    if (opt_.stream && !failed_) {
      stream_choice(ci, o, prefix);
    } else {
      if (!c.started) c.text = prefix;
      c.text += o.text;
      if (opt_.logprobs) {
        if (opt_.kind == Kind::kChat)
          append_chat_logprobs(c.logprobs, o.logprobs, token_text);
        else
          append_completion_logprobs(c.logprobs, o.logprobs, token_text, c.text_offset);
      }
    }
    c.started = true;
  }
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

void GenerationJob::stream_choice(size_t ci, const CompletionOutput& o, const std::string& prefix) {
  Choice& c = choices_[ci];
  const TokenTextFn token_text = [this](int32_t id) { return api_.token_text(id); };
  json logprobs = nullptr;
  if (opt_.logprobs && !o.logprobs.empty()) {
    if (opt_.kind == Kind::kChat)
      append_chat_logprobs(logprobs, o.logprobs, token_text);
    else
      append_completion_logprobs(logprobs, o.logprobs, token_text, c.text_offset);
  }
  json chunk = chunk_base();
  if (opt_.kind == Kind::kChat) {
    if (!c.started) {
      json role = chunk;
      role["choices"] = json::array({{{"index", ci},
                                      {"delta", {{"role", "assistant"}, {"content", ""}}},
                                      {"logprobs", nullptr},
                                      {"finish_reason", nullptr}}});
      emit(sse_event(role));
    }
    json delta = json::object();
    json finish = finish_reason_json(o.finish_reason);
    if (opt_.parsing.active()) {
      if (!c.parser) c.parser.emplace(opt_.parsing);
      ChatDelta d = c.parser->feed(o.text);
      if (o.finish_reason) {
        ChatDelta rest = c.parser->finish();
        d.reasoning += rest.reasoning;
        d.content += rest.content;
        for (auto& t : rest.tool_calls) d.tool_calls.push_back(std::move(t));
        if (c.parser->any_tool_call() && *o.finish_reason == FinishReason::kStop && !opt_.named_tool_choice)
          finish = "tool_calls";
      }
      if (!d.reasoning.empty()) {  // both names: DeepSeek's API and older vLLM, newer vLLM
        delta["reasoning"] = d.reasoning;
        delta["reasoning_content"] = std::move(d.reasoning);
      }
      if (!d.content.empty()) delta["content"] = std::move(d.content);
      if (!d.tool_calls.empty()) delta["tool_calls"] = tool_call_deltas_json(d.tool_calls);
    } else if (!o.text.empty()) {
      delta["content"] = o.text;
    }
    if (delta.empty() && !o.finish_reason && logprobs.is_null()) return;
    json choice = {{"index", ci},
                   {"delta", std::move(delta)},
                   {"logprobs", std::move(logprobs)},
                   {"finish_reason", std::move(finish)}};
    if (o.finish_reason) choice["stop_reason"] = stop_reason_json(o.stop_reason);
    chunk["choices"] = json::array({std::move(choice)});
  } else {
    const std::string text = prefix + o.text;
    if (text.empty() && !o.finish_reason && logprobs.is_null()) return;
    chunk["choices"] = json::array({{{"index", ci},
                                     {"text", text},
                                     {"logprobs", std::move(logprobs)},
                                     {"finish_reason", finish_reason_json(o.finish_reason)},
                                     {"stop_reason", stop_reason_json(o.stop_reason)}}});
  }
  emit(sse_event(chunk));
}

void GenerationJob::finish_all() {
  done_ = true;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  for (int n : prompt_lens_) prompt_tokens += n;
  for (const auto& c : choices_) completion_tokens += c.n_generated;
  if (!failed_) {
    if (opt_.stream) {
      if (!error_.empty()) {
        emit(sse_event(ApiError(error_status_, "generation failed: " + error_, "", "engine_error").to_json()));
      } else if (opt_.include_usage) {
        json u = chunk_base();
        u["choices"] = json::array();
        u["usage"] = usage_json(prompt_tokens, completion_tokens);
        emit(sse_event(u));
      }
      emit(std::string(kSseDone));
      emit_end();
    } else if (!error_.empty()) {
      send_error(error_status_, "generation failed: " + error_);
    } else {
      json body = chunk_base();
      json choices = json::array();
      for (size_t ci = 0; ci < choices_.size(); ++ci) {
        Choice& c = choices_[ci];
        json choice = {{"index", ci}};
        json finish = finish_reason_json(c.finish);
        if (opt_.kind == Kind::kChat && opt_.parsing.active()) {
          ChatMessageOut m = parse_chat_output(opt_.parsing, c.text);
          json msg = {{"role", "assistant"}};
          msg["content"] = m.content.empty() && !m.tool_calls.empty() ? json(nullptr) : json(std::move(m.content));
          if (m.reasoning) {
            msg["reasoning"] = *m.reasoning;
            msg["reasoning_content"] = std::move(*m.reasoning);
          }
          if (!m.tool_calls.empty()) {
            msg["tool_calls"] = tool_calls_json(m.tool_calls);
            if (c.finish == FinishReason::kStop && !opt_.named_tool_choice) finish = "tool_calls";
          }
          choice["message"] = std::move(msg);
        } else if (opt_.kind == Kind::kChat) {
          choice["message"] = {{"role", "assistant"}, {"content", std::move(c.text)}};
        } else {
          choice["text"] = std::move(c.text);
        }
        choice["logprobs"] = std::move(c.logprobs);
        choice["finish_reason"] = std::move(finish);
        choice["stop_reason"] = stop_reason_json(c.stop_reason);
        choices.push_back(std::move(choice));
      }
      body["choices"] = std::move(choices);
      body["usage"] = usage_json(prompt_tokens, completion_tokens);
      res_->send(200, "application/json", dump_json(body));
    }
  }
  api_.job_finished(opt_.id);
}

void GenerationJob::send_error(int status, const std::string& message) {
  failed_ = true;
  res_->send(status, "application/json",
             dump_json(ApiError(status, message, "", status >= 500 ? "engine_error" : "").to_json()));
}

void GenerationJob::abort() {
  std::vector<std::string> ids;
  {
    std::lock_guard lk(mu_);
    if (done_) return;
    for (size_t p = 0; p < prompts_.size(); ++p)
      if (!prompts_[p].finished) ids.push_back(engine_id(p));
  }
  for (const auto& id : ids) api_.model().engine->abort(id);
}

void GenerationJob::fail_start(size_t failed_at, const ApiError& err) {
  {
    std::lock_guard lk(mu_);
    failed_ = true;
    // The prompts never added will not report: count them as finished.
    for (size_t p = failed_at; p < prompts_.size(); ++p)
      if (!prompts_[p].finished) prompts_[p].finished = true, ++n_finished_;
    // Nothing was sent yet (begin() was not called): a plain error response, streaming or not.
    res_->send(err.status(), "application/json", dump_json(err.to_json()));
    if (n_finished_ == prompts_.size()) {
      done_ = true;
      api_.job_finished(opt_.id);
      return;
    }
  }
  for (size_t p = 0; p < failed_at; ++p) api_.model().engine->abort(engine_id(p));
}

}  // namespace mla::server
