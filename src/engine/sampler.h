#pragma once
// Token sampling from one logits row under a request's SamplingParams.
//
// Order (as vLLM's V1 sampler): logprobs from the raw logits; a grammar's token mask (disallowed
// tokens → -inf; then min_tokens does not mask EOS: the grammar decides); min_tokens masks EOS and
// stop_token_ids; logit_bias; repetition penalty (prompt + output tokens: l > 0 ? l / r : l * r,
// once per distinct token); frequency and presence penalties (output tokens); then greedy argmax
// when temperature is 0, else softmax(l / T), min_p (drop p < min_p * p_max), top_k, top_p
// (smallest most-likely set with mass >= top_p), and one uniform draw from the sequence's
// generator over what is left, most likely first. Ties are broken by the lower token id.
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/types.h"

namespace mla {

// xoshiro256** seeded through splitmix64: the same seed gives the same stream on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0);
  uint64_t next();
  double uniform();  // [0, 1), 53 random bits
 private:
  uint64_t s_[4];
};

// A sequence's token history in the form the penalties need.
class PenaltyState {
 public:
  void set_prompt(std::span<const int32_t> prompt);  // sorted distinct prompt tokens
  void add_output(int32_t token);
  const std::vector<int32_t>& prompt_tokens() const { return prompt_; }
  const std::unordered_map<int32_t, int>& output_counts() const { return output_counts_; }

 private:
  std::vector<int32_t> prompt_;
  std::unordered_map<int32_t, int> output_counts_;
};

struct SampleResult {
  int32_t token = 0;
  std::optional<SampleLogprobs> logprobs;
};

class Sampler {
 public:
  explicit Sampler(int n_vocab);
  int n_vocab() const { return n_vocab_; }

  // logits: [n_vocab] raw model output. n_generated: tokens this sequence generated so far.
  // stop_ids_for_min_tokens: EOS ids (unless ignore_eos), masked with params.stop_token_ids while
  // n_generated < params.min_tokens. mask: the grammar's allowed tokens (grammar/token_mask.h),
  // empty when unconstrained.
  SampleResult sample(const float* logits, const SamplingParams& params, const PenaltyState& penalties, int n_generated,
                      std::span<const int32_t> eos_ids, Rng& rng, std::span<const uint32_t> mask = {});

  // Speculative decoding: the token for this row when the MTP layer drafted `draft` (a one-hot
  // draft) for it, and whether the draft is accepted. Greedy: sample()'s token, accepted when it
  // is the draft. Otherwise the speculative rejection rule: the draft is accepted with the
  // probability the row's sampling distribution gives it, else a token is drawn from that
  // distribution without the draft; either way the token is distributed as sample()'s would be.
  // No grammar (constrained sequences do not speculate).
  SampleResult sample_draft(const float* logits, const SamplingParams& params, const PenaltyState& penalties,
                            int n_generated, std::span<const int32_t> eos_ids, Rng& rng, int32_t draft, bool& accepted);

  // token's logprob under the raw logits (log-softmax), its rank and the k most likely tokens'
  // logprobs: the sampled token's entry, or a prompt token's for prompt logprobs.
  SampleLogprobs token_logprobs(const float* logits, int32_t token, int k);

  // The processed logits of the last sample() call (after bias and penalties, before
  // temperature): for tests.
  std::span<const float> last_processed() const { return work_; }

 private:
  // work_ = logits after the mask, min_tokens, bias and penalties.
  void process(const float* logits, const SamplingParams& p, const PenaltyState& pen, int n_generated,
               std::span<const int32_t> eos_ids, std::span<const uint32_t> mask);
  int32_t argmax() const;                      // of work_, ties: lower id
  bool greedy(const SamplingParams& p) const;  // temperature ~0, or no finite logit left
  // The sampling distribution over work_ in cand_ ((weight, id), draw order), returns its total.
  double distribution(const SamplingParams& p);
  // One draw from cand_ (total: the weights' sum without `skip`), leaving out token `skip`.
  int32_t draw(double total, Rng& rng, int32_t skip = -1) const;
  std::optional<SampleLogprobs> logprobs(const float* logits, const SamplingParams& p, int32_t token);

  int n_vocab_;
  std::vector<float> work_;
  std::vector<float> probs_;
  std::vector<std::pair<float, int32_t>> cand_;
};

}  // namespace mla
