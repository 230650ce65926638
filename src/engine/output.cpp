#include "engine/output.h"

#include <algorithm>

namespace mla {

void SeqOutput::start(const TextDecoder* decoder, std::span<const int32_t> prompt, const SamplingParams& params) {
  if (decoder) decoder_ = decoder->start(prompt, params.skip_special_tokens);
  stops_ = params.stop;
  hold_stops_ = !stops_.empty() && !params.include_stop_str_in_output;
}

size_t SeqOutput::holdback() const {
  if (!hold_stops_) return 0;
  size_t best = 0;
  for (const auto& s : stops_) {
    // Longest proper prefix of s that text_ ends with.
    for (size_t k = std::min(s.size() - 1, text_.size()); k > best; --k) {
      if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
        best = k;
        break;
      }
    }
  }
  return best;
}

std::optional<FinishReason> SeqOutput::on_token(int32_t token, std::optional<SampleLogprobs> logprobs, int n_generated,
                                                bool at_max_len, const SamplingParams& p,
                                                std::span<const int32_t> eos_ids) {
  new_tokens_.push_back(token);
  if (logprobs) new_logprobs_.push_back(std::move(*logprobs));
  const bool may_stop = n_generated >= p.min_tokens;

  if (may_stop && !p.ignore_eos && std::find(eos_ids.begin(), eos_ids.end(), token) != eos_ids.end()) {
    stop_reason_ = std::monostate{};
    finish_with(FinishReason::kStop, true);
    return finish_;
  }
  if (may_stop && std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) != p.stop_token_ids.end()) {
    stop_reason_ = token;
    finish_with(FinishReason::kStop, true);
    return finish_;
  }
  if (decoder_) {
    const size_t old_len = text_.size();
    text_ += decoder_->push(token);
    if (may_stop && !stops_.empty() && text_.size() > old_len) {
      // The earliest stop string that ends in the new text.
      size_t best_pos = std::string::npos;
      const std::string* best = nullptr;
      for (const auto& s : stops_) {
        size_t from = old_len >= s.size() - 1 ? old_len - (s.size() - 1) : 0;
        size_t pos = text_.find(s, from);
        if (pos != std::string::npos && pos < best_pos) {
          best_pos = pos;
          best = &s;
        }
      }
      if (best) {
        size_t cut = p.include_stop_str_in_output ? best_pos + best->size() : best_pos;
        text_.resize(std::max(cut, n_sent_));
        stop_reason_ = *best;
        finish_with(FinishReason::kStop, false);
        return finish_;
      }
    }
  }
  if (n_generated >= p.max_tokens || at_max_len) {
    finish_with(FinishReason::kLength, true);
    return finish_;
  }
  return std::nullopt;
}

void SeqOutput::finish_external(FinishReason reason) {
  if (finish_) return;
  text_.resize(std::max(n_sent_, text_.size() - holdback()));  // never a partial stop string
  finish_with(reason, false);
}

void SeqOutput::finish_grammar_end() {
  if (finish_) return;
  stop_reason_ = std::monostate{};
  finish_with(FinishReason::kStop, true);
}

void SeqOutput::finish_with(FinishReason reason, bool flush_text) {
  finish_ = reason;
  if (flush_text && decoder_) text_ += decoder_->flush();
  hold_stops_ = false;  // at the end nothing more is held back
}

bool SeqOutput::has_delta() const {
  if (!new_tokens_.empty() || (finish_ && !finish_sent_)) return true;
  return text_.size() - holdback() > n_sent_;
}

CompletionOutput SeqOutput::take_delta(int index, int n_generated) {
  CompletionOutput out;
  out.index = index;
  out.token_ids = std::move(new_tokens_);
  new_tokens_.clear();
  out.logprobs = std::move(new_logprobs_);
  new_logprobs_.clear();
  const size_t end = text_.size() - holdback();
  if (end > n_sent_) {
    out.text = text_.substr(n_sent_, end - n_sent_);
    n_sent_ = end;
  }
  out.n_generated = n_generated;
  if (finish_ && !finish_sent_) {
    out.finish_reason = finish_;
    out.stop_reason = stop_reason_;
    finish_sent_ = true;
  }
  return out;
}

}  // namespace mla
