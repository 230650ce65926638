// SamplingParams validation, enum names, and RequestStream (the blocking output queue).
#include <cmath>

#include "engine/types.h"
#include "grammar/grammar.h"
#include "util/error.h"

namespace mla {

std::string_view to_string(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
  }
  return "?";
}

void SamplingParams::validate(int n_vocab) const {
  auto finite = [](float x) { return std::isfinite(x); };
  if (n < 1 || n > 128) fail("sampling params: n must be in [1, 128], got {}", n);
  if (!finite(temperature) || temperature < 0.0f)
    fail("sampling params: temperature must be >= 0, got {}", temperature);
  if (!finite(top_p) || top_p <= 0.0f || top_p > 1.0f) fail("sampling params: top_p must be in (0, 1], got {}", top_p);
  if (!finite(min_p) || min_p < 0.0f || min_p > 1.0f) fail("sampling params: min_p must be in [0, 1], got {}", min_p);
  if (!finite(repetition_penalty) || repetition_penalty <= 0.0f)
    fail("sampling params: repetition_penalty must be > 0, got {}", repetition_penalty);
  if (!finite(frequency_penalty) || frequency_penalty < -2.0f || frequency_penalty > 2.0f)
    fail("sampling params: frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
  if (!finite(presence_penalty) || presence_penalty < -2.0f || presence_penalty > 2.0f)
    fail("sampling params: presence_penalty must be in [-2, 2], got {}", presence_penalty);
  if (max_tokens < 0) fail("sampling params: max_tokens must be >= 0, got {}", max_tokens);
  if (min_tokens < 0 || min_tokens > max_tokens)
    fail("sampling params: min_tokens must be in [0, max_tokens={}], got {}", max_tokens, min_tokens);
  if (logprobs && (*logprobs < 0 || *logprobs > 20))
    fail("sampling params: logprobs must be in [0, 20], got {}", *logprobs);
  if (prompt_logprobs && (*prompt_logprobs < 0 || *prompt_logprobs > 20))
    fail("sampling params: prompt_logprobs must be in [0, 20], got {}", *prompt_logprobs);
  for (const auto& [tok, bias] : logit_bias) {
    if (tok < 0 || tok >= n_vocab) fail("sampling params: logit_bias token {} out of range [0, {})", tok, n_vocab);
    if (!finite(bias) || bias < -100.0f || bias > 100.0f)
      fail("sampling params: logit_bias for token {} must be in [-100, 100], got {}", tok, bias);
  }
  for (int32_t tok : stop_token_ids)
    if (tok < 0 || tok >= n_vocab) fail("sampling params: stop_token_ids entry {} out of range [0, {})", tok, n_vocab);
  for (const auto& s : stop)
    if (s.empty()) fail("sampling params: stop strings must not be empty");
  if (grammar && grammar->n_vocab() != n_vocab)
    fail("sampling params: the grammar was compiled for {} tokens, the model has {}", grammar->n_vocab(), n_vocab);
}

bool RequestStream::next(RequestOutput& out) {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return !queue_.empty() || final_taken_; });
  if (queue_.empty()) return false;
  out = std::move(queue_.front());
  queue_.pop_front();
  if (out.finished) final_taken_ = true;
  return true;
}

bool RequestStream::next_for(RequestOutput& out, std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  if (!cv_.wait_for(lk, timeout, [&] { return !queue_.empty() || final_taken_; })) return false;
  if (queue_.empty()) return false;
  out = std::move(queue_.front());
  queue_.pop_front();
  if (out.finished) final_taken_ = true;
  return true;
}

bool RequestStream::finished() const {
  std::lock_guard lk(mu_);
  return final_taken_;
}

void RequestStream::push(RequestOutput out) {
  {
    std::lock_guard lk(mu_);
    if (final_pushed_) return;
    final_pushed_ = out.finished;
    queue_.push_back(std::move(out));
  }
  cv_.notify_all();
}

}  // namespace mla
