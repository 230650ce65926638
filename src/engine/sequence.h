#pragma once
// A request and its sequences as the engine tracks them. A request with n > 1 starts with one
// sequence; when that sequence's prompt is computed it forks into n, which share the prompt's
// blocks. Each sequence is scheduled on its own from then on.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/output.h"
#include "engine/sampler.h"
#include "engine/types.h"
#include "grammar/grammar.h"
#include "kv/kv_manager.h"

namespace mla {

struct Request;

enum class SeqStatus { kWaiting, kRunning, kFinished };

struct Sequence {
  Request* req = nullptr;
  int index = 0;                // 0..n-1 within the request
  uint64_t id = 0;              // the engine's identity (SeqMeta::seq_id): unique for the engine's life
  std::vector<int32_t> tokens;  // prompt + generated
  int n_prompt = 0;
  int n_computed = 0;  // tokens whose latent rows are in the cache
  kv::SeqBlocks blocks;
  SeqStatus status = SeqStatus::kWaiting;
  // Running-set slots this sequence stands for: n for a request's first sequence before the
  // fork (its siblings will need them), else 1.
  int n_slots = 1;

  Rng rng;
  PenaltyState penalties;
  SeqOutput output;
  std::unique_ptr<GrammarMatcher> grammar;  // params.grammar's state for this sequence, or null

  // Speculative decoding (EngineConfig::num_speculative_tokens > 0).
  std::vector<int32_t> drafts;   // MTP drafts for the positions after tokens, verified in the next step
  int mtp_valid = 0;             // the MTP layer's cache rows at positions 1..mtp_valid are final
  std::vector<float> pending_h;  // the trunk's hidden state at n_computed - 1 when mtp_valid < n_computed
  bool mtp_hold = false;         // forked this step: the MTP row after the prompt waits (shared blocks)

  int n_generated() const { return static_cast<int>(tokens.size()) - n_prompt; }
  // Prompt logprobs still to compute: the request asked for them, this is the sequence that
  // computes the prompt (index 0, before the fork) and some prompt position lacks its row.
  bool wants_prompt_logits() const;
};

struct Request {
  std::string id;
  std::vector<int32_t> prompt;
  SamplingParams params;
  OutputCallback on_output;  // or
  std::shared_ptr<RequestStream> stream;
  std::vector<std::unique_ptr<Sequence>> seqs;
  bool forked = false;
  int n_finished = 0;
  int n_cached_tokens = -1;  // prefix-cache hit of the first admission
  // params.prompt_logprobs: the logprobs of prompt tokens 1..size() so far, in order (a
  // preempted sequence recomputes rows it already has; they are not added twice).
  std::vector<SampleLogprobs> prompt_logprobs;
  bool prompt_logprobs_sent = false;
  bool aborted = false;
  std::string error;
  int error_status = 500;  // HTTP status of the error: 503 when the engine itself became unavailable

  // The one way a sequence is made: sequence `index` (0..n-1) of this request, appended to seqs,
  // with the prompt as its tokens, its generator seeded from params.seed and index, its penalty
  // state, its output (decoder may be null: no text) and a fresh grammar matcher. Sequence 0 holds
  // the running-set slots of all n until the fork. params.seed must be set (Engine::add_request
  // does).
  Sequence& add_sequence(int index, const TextDecoder* decoder);
};

}  // namespace mla
