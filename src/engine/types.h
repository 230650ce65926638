#pragma once
// The engine's shared types: what a request asks for (SamplingParams), what it gets back
// (RequestOutput deltas through a RequestStream or an OutputCallback), the engine's configuration
// and counters. The sampler, the output handling, the sequences and the server use them; the
// Engine facade (engine/engine.h) is built on them.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "kv/tier_store.h"  // TierOptions
#include "model/batch.h"    // MlaPathPolicy

namespace mla {

class CompiledGrammar;  // grammar/grammar.h: a grammar compiled for the model's vocabulary

// Per-request sampling and stopping. Defaults follow vLLM / the OpenAI API where they differ from
// "off" (max_tokens 16, temperature 1). validate() throws mla::Error with the field name.
struct SamplingParams {
  int n = 1;                                          // sequences generated from one prompt (share its KV blocks)
  float temperature = 1.0f;                           // 0 → greedy (argmax, ties → lowest token id)
  int top_k = 0;                                      // <= 0: off
  float top_p = 1.0f;                                 // (0, 1]; 1: off
  float min_p = 0.0f;                                 // [0, 1]; 0: off. Drops p < min_p * p_max
  std::optional<uint64_t> seed;                       // same seed → same tokens, whatever else runs
  float repetition_penalty = 1.0f;                    // > 0; over prompt + output tokens (CTRL rule)
  float frequency_penalty = 0.0f;                     // [-2, 2]; × count in output tokens
  float presence_penalty = 0.0f;                      // [-2, 2]; once if present in output tokens
  std::vector<std::pair<int32_t, float>> logit_bias;  // token id → added to its logit
  int min_tokens = 0;                                 // EOS, stop_token_ids and stop strings ignored before this
  int max_tokens = 16;  // >= 0 (0: the prompt is computed, nothing sampled); capped by max_model_len
  bool ignore_eos = false;
  std::vector<std::string> stop;  // stop strings: never emitted, not even partially
  std::vector<int32_t> stop_token_ids;
  bool include_stop_str_in_output = false;
  std::optional<int> logprobs;  // nullopt: none; k >= 0: sampled token's + top-k logprobs
  // nullopt: none; k >= 0: every prompt token's logprob given the tokens before it, with its rank
  // and the top-k at that position (RequestOutput::prompt_logprobs), computed in the prefill
  // itself. Such a request does not take its prefix from the cache (the cache keeps rows, not
  // logits), and its prefill chunks are capped so that the logits rows stay bounded.
  std::optional<int> prompt_logprobs;
  bool skip_special_tokens = true;  // for the text; token ids always include every token
  // Constrained decoding: each sequence only samples tokens the grammar allows next, and ends
  // (finish reason stop) when the grammar has ended (a stop token after a complete match). With
  // a grammar, min_tokens does not hold back an EOS the grammar allows. Shared, immutable.
  std::shared_ptr<const CompiledGrammar> grammar;

  // n_vocab: ids in logit_bias / stop_token_ids must be < n_vocab; a grammar must have been
  // compiled for n_vocab.
  void validate(int n_vocab) const;
};

enum class FinishReason { kStop, kLength, kAbort, kError };
std::string_view to_string(FinishReason r);  // "stop" | "length" | "abort" | "error"

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;  // natural log of the model's probability (raw logits, before sampling
                         // parameters are applied — the OpenAI convention)
};

// Logprobs for one generated (or, for prompt logprobs, one prompt) token.
struct SampleLogprobs {
  TokenLogprob sampled;
  int rank = 0;                   // 1 + the number of tokens with a higher logit
  std::vector<TokenLogprob> top;  // params.logprobs (prompt_logprobs) entries, most likely first
};

// What one of the request's n sequences produced since its previous output.
struct CompletionOutput {
  int index = 0;                         // 0..n-1
  std::vector<int32_t> token_ids;        // new tokens (including a final EOS / stop token)
  std::string text;                      // new text (empty when the engine has no decoder)
  std::vector<SampleLogprobs> logprobs;  // one per new token when params.logprobs is set
  int n_generated = 0;                   // tokens generated so far in total
  std::optional<FinishReason> finish_reason;
  // Why it stopped, when finish_reason == kStop: the stop string, the stop token id, or
  // monostate for EOS.
  std::variant<std::monostate, std::string, int32_t> stop_reason;
};

struct RequestOutput {
  std::string request_id;
  std::vector<CompletionOutput> outputs;  // only the sequences with something new
  bool finished = false;                  // all n sequences finished: the last output
  int n_prompt_tokens = 0;
  int n_cached_tokens = 0;  // prompt tokens served from the prefix cache
  // params.prompt_logprobs: entry i is prompt token i + 1's (the first token has none); in the
  // first output after the whole prompt is computed, empty in every other.
  std::vector<SampleLogprobs> prompt_logprobs;
  std::string error;       // set with finish_reason kError
  int error_status = 500;  // 503: the engine became unavailable (a worker rank is gone), not this request's fault
};

// A request's outputs as a blocking queue (the alternative to a callback).
class RequestStream {
 public:
  // Waits for the next output; false once the final output has been taken.
  bool next(RequestOutput& out);
  // As next(), but gives up after `timeout` (returns false; finished() tells which).
  bool next_for(RequestOutput& out, std::chrono::milliseconds timeout);
  bool finished() const;
  // Called by the engine.
  void push(RequestOutput out);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> queue_;
  bool final_pushed_ = false;
  bool final_taken_ = false;
};

// Called on the thread that runs the engine; must not block for long. May call add_request or
// abort.
using OutputCallback = std::function<void(RequestOutput&&)>;

// Cumulative since start-up, except the first four (current values).
struct EngineCounters {
  int n_running = 0;      // sequences scheduled in the running set
  int n_waiting = 0;      // sequences waiting (new or preempted)
  double kv_usage = 0.0;  // fraction of KV blocks held by sequences, 0..1
  int64_t n_kv_blocks_free = 0;
  int64_t n_kv_blocks = 0;
  int64_t n_prompt_tokens = 0;      // prompt tokens of admitted requests
  int64_t n_generation_tokens = 0;  // tokens sampled
  int64_t n_preemptions = 0;
  int64_t n_prefix_queries = 0;  // prompt tokens looked up in the prefix cache
  int64_t n_prefix_hits = 0;     // of those, tokens found
  // Tokens the model sent down each MLA path, as it counted them (ModelRunner::path_tokens: each
  // forward call's tokens once, by the path the model chose for them, overrides included).
  int64_t n_tokens_mha = 0;
  int64_t n_tokens_mqa = 0;
  int64_t n_sparse_layer_tokens = 0;   // DSA: tokens through sparse layers, summed over layers
  int64_t n_sparse_selected_rows = 0;  // DSA: context rows the indexer selected for them
  int64_t n_steps = 0;                 // forward calls
  double forward_seconds = 0;          // wall time in the model's forward calls
  int64_t n_masks = 0;                 // grammar token masks filled (constrained samples)
  // Wall time the engine waited for grammar masks after the forward pass had finished (the part
  // of the mask work the forward did not hide).
  double mask_wait_seconds = 0;
  int64_t n_requests_finished = 0;
  // The finished requests by their first sequence's finish reason (stop, length, abort, error).
  // Counted with the gauges above, before the request's last output is delivered: a reader that
  // sees the request gone from n_running also sees it here.
  int64_t n_finished_stop = 0;
  int64_t n_finished_length = 0;
  int64_t n_finished_abort = 0;
  int64_t n_finished_error = 0;
  // Speculative decoding (vLLM's spec-decode counters): verify steps that carried drafts, the
  // drafts they carried, the drafts accepted, and the accepted ones by draft position (index 0:
  // the first draft of a step).
  int64_t n_spec_drafts = 0;
  int64_t n_spec_draft_tokens = 0;
  int64_t n_spec_accepted_tokens = 0;
  std::vector<int64_t> n_spec_accepted_per_pos;  // num_speculative_tokens entries
  int64_t n_spec_steps = 0;                      // forward calls that carried verify rows
  double mtp_seconds = 0;                        // wall time in the MTP layer's calls (its rows and the drafts)
  // The prefix cache's lower tiers (kv/tier_store.h; all 0 without them): block lookups that found
  // a block in host RAM / on disk and that found none there, file bytes read and written, prompt
  // tokens whose KV was loaded instead of computed (prefill saved), blocks the disk writer dropped
  // (queue full) or could not write, files skipped and deleted; and the bytes each tier holds now.
  int64_t n_tier_host_hits = 0;
  int64_t n_tier_host_misses = 0;
  int64_t n_tier_disk_hits = 0;
  int64_t n_tier_disk_misses = 0;
  int64_t tier_disk_bytes_read = 0;
  int64_t tier_disk_bytes_written = 0;
  int64_t n_tier_tokens_loaded = 0;
  int64_t n_tier_writes_dropped = 0;
  int64_t n_tier_write_errors = 0;
  int64_t n_tier_files_rejected = 0;
  int64_t tier_host_bytes_used = 0;
  int64_t tier_disk_bytes_used = 0;
  // The routed-expert cache (--weights-memory; all 0 without it): its slots, the (layer, expert)
  // lookups found in it and read from the file, the file bytes read, the forward's wait for them;
  // read-ahead (--expert-io-threads): experts and bytes read ahead, (layer, expert) pairs
  // predicted, predicted and used, used in a layer that had a prediction (ExpertCacheCounters).
  int64_t expert_cache_slots = 0;
  int64_t n_expert_cache_hits = 0;
  int64_t n_expert_cache_misses = 0;
  int64_t expert_cache_bytes_read = 0;
  double expert_cache_stall_seconds = 0;
  int64_t n_expert_cache_read_ahead = 0;
  int64_t expert_cache_read_ahead_bytes = 0;
  int64_t n_expert_cache_predictions = 0;
  int64_t n_expert_cache_predictions_used = 0;
  int64_t n_expert_cache_predictable_uses = 0;
};

// Every field of EngineCounters, by kind: the gauges say how the engine stands now, the totals
// count since it started. operator- walks these lists; tests/engine/engine_counters_test.cpp
// fails unless together they name every field once.
inline constexpr std::tuple kEngineCounterGauges{&EngineCounters::n_running,
                                                 &EngineCounters::n_waiting,
                                                 &EngineCounters::kv_usage,
                                                 &EngineCounters::n_kv_blocks_free,
                                                 &EngineCounters::n_kv_blocks,
                                                 &EngineCounters::tier_host_bytes_used,
                                                 &EngineCounters::tier_disk_bytes_used,
                                                 &EngineCounters::expert_cache_slots};
inline constexpr std::tuple kEngineCounterTotals{&EngineCounters::n_prompt_tokens,
                                                 &EngineCounters::n_generation_tokens,
                                                 &EngineCounters::n_preemptions,
                                                 &EngineCounters::n_prefix_queries,
                                                 &EngineCounters::n_prefix_hits,
                                                 &EngineCounters::n_tokens_mha,
                                                 &EngineCounters::n_tokens_mqa,
                                                 &EngineCounters::n_sparse_layer_tokens,
                                                 &EngineCounters::n_sparse_selected_rows,
                                                 &EngineCounters::n_steps,
                                                 &EngineCounters::forward_seconds,
                                                 &EngineCounters::n_masks,
                                                 &EngineCounters::mask_wait_seconds,
                                                 &EngineCounters::n_requests_finished,
                                                 &EngineCounters::n_finished_stop,
                                                 &EngineCounters::n_finished_length,
                                                 &EngineCounters::n_finished_abort,
                                                 &EngineCounters::n_finished_error,
                                                 &EngineCounters::n_spec_drafts,
                                                 &EngineCounters::n_spec_draft_tokens,
                                                 &EngineCounters::n_spec_accepted_tokens,
                                                 &EngineCounters::n_spec_accepted_per_pos,
                                                 &EngineCounters::n_spec_steps,
                                                 &EngineCounters::mtp_seconds,
                                                 &EngineCounters::n_tier_host_hits,
                                                 &EngineCounters::n_tier_host_misses,
                                                 &EngineCounters::n_tier_disk_hits,
                                                 &EngineCounters::n_tier_disk_misses,
                                                 &EngineCounters::tier_disk_bytes_read,
                                                 &EngineCounters::tier_disk_bytes_written,
                                                 &EngineCounters::n_tier_tokens_loaded,
                                                 &EngineCounters::n_tier_writes_dropped,
                                                 &EngineCounters::n_tier_write_errors,
                                                 &EngineCounters::n_tier_files_rejected,
                                                 &EngineCounters::n_expert_cache_hits,
                                                 &EngineCounters::n_expert_cache_misses,
                                                 &EngineCounters::expert_cache_bytes_read,
                                                 &EngineCounters::expert_cache_stall_seconds,
                                                 &EngineCounters::n_expert_cache_read_ahead,
                                                 &EngineCounters::expert_cache_read_ahead_bytes,
                                                 &EngineCounters::n_expert_cache_predictions,
                                                 &EngineCounters::n_expert_cache_predictions_used,
                                                 &EngineCounters::n_expert_cache_predictable_uses};

// What happened between two snapshots of Engine::counters(), e.g. a measured run without its
// warm-up: every total of `later` less the same total of `earlier` (n_spec_accepted_per_pos
// position by position, where `earlier` has the position), every gauge as it is in `later`.
inline EngineCounters operator-(const EngineCounters& later, const EngineCounters& earlier) {
  EngineCounters d = later;
  auto subtract = [&](auto field) {
    auto& into = d.*field;
    const auto& from = earlier.*field;
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(into)>, std::vector<int64_t>>) {
      for (size_t i = 0; i < into.size() && i < from.size(); ++i) into[i] -= from[i];
    } else {
      into -= from;
    }
  };
  std::apply([&](auto... field) { (subtract(field), ...); }, kEngineCounterTotals);
  return d;
}

struct EngineConfig {
  int max_num_batched_tokens = 2048;  // token budget per step (prefill chunks + decodes)
  int max_num_seqs = 64;              // cap on running sequences
  int max_model_len = 0;              // 0: the model's context length; capped by KV capacity
  bool enable_prefix_caching = true;
  MlaPathPolicy path_policy = MlaPathPolicy::Auto;
  int decode_threshold = 1;            // `auto`: query length <= this goes to MQA (BatchMeta, for the model)
  std::vector<int32_t> eos_token_ids;  // stop generation unless ignore_eos
  // Test and tool hook, called on the engine thread with the raw logits row a sequence samples
  // from and the position of the token they follow (they predict position + 1).
  std::function<void(const std::string& request_id, int seq_index, int position, std::span<const float> logits)>
      on_logits;
  bool all_logits = false;  // compute (and pass to on_logits) every row's logits, prompts included
  // Prompt logprobs: prefill tokens of such requests per step, all together (the logits rows
  // they add; SchedulerConfig::max_prompt_logits_rows).
  int max_prompt_logits_rows = 256;
  // Speculative decoding with the model's MTP layer: up to this many draft tokens per sequence
  // and step (1..kMaxSpeculativeTokens, engine/speculative.h; 0: off). The runner must have the
  // MTP layer loaded. Greedy outputs are those of decoding without it; sampled ones follow the
  // same distribution. Sequences under a grammar do not speculate.
  int num_speculative_tokens = 0;
  // The prefix cache's lower tiers, host RAM and a directory on disk (off unless sized or named;
  // nothing without enable_prefix_caching).
  kv::TierOptions kv_tiers;
};

}  // namespace mla
