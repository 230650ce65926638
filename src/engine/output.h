#pragma once
// Per-sequence output handling after sampling: stop checks (EOS, stop_token_ids, stop strings,
// max_tokens, max_model_len), incremental text with stop strings held back while they could
// still match, and the pending delta for the next RequestOutput.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/text_decoder.h"
#include "engine/types.h"

namespace mla {

class SeqOutput {
 public:
  // decoder may be null (no text). prompt: context for the decoder.
  void start(const TextDecoder* decoder, std::span<const int32_t> prompt, const SamplingParams& params);

  // One sampled token. n_generated counts it; at_max_len: the sequence reached max_model_len.
  // Returns the finish reason when the sequence ends with this token.
  std::optional<FinishReason> on_token(int32_t token, std::optional<SampleLogprobs> logprobs, int n_generated,
                                       bool at_max_len, const SamplingParams& params, std::span<const int32_t> eos_ids);
  // Ends the sequence for a reason decided outside (abort, error): held-back text is dropped.
  void finish_external(FinishReason reason);
  // Ends the sequence because its grammar has ended (finish reason stop, as at EOS): all text
  // is kept.
  void finish_grammar_end();

  bool finished() const { return finish_.has_value(); }
  std::optional<FinishReason> finish_reason() const { return finish_; }
  bool has_delta() const;
  // Moves the pending delta out; index: the sequence's index in its request.
  CompletionOutput take_delta(int index, int n_generated);
  const std::string& text() const { return text_; }  // generated text so far (tests)

 private:
  void finish_with(FinishReason reason, bool flush_text);
  size_t holdback() const;  // bytes at the end of text_ that could start a stop string

  std::unique_ptr<IncrementalDecoder> decoder_;
  std::vector<std::string> stops_;
  bool hold_stops_ = false;  // stop strings present and not included in the output
  std::string text_;         // generated text (cut at a stop string)
  size_t n_sent_ = 0;        // bytes of text_ already in a delta
  std::vector<int32_t> new_tokens_;
  std::vector<SampleLogprobs> new_logprobs_;
  std::optional<FinishReason> finish_;
  bool finish_sent_ = false;
  std::variant<std::monostate, std::string, int32_t> stop_reason_;
};

}  // namespace mla
