#pragma once
// Speculative decoding with the model's own MTP (nextn) layer, and the `--speculative-config JSON`
// that turns it on (mla serve, run and bench), spelled as vLLM spells it:
//   {"method": "mtp", "num_speculative_tokens": K}
//
// The Speculator is the engine's whole share of it; the engine's step calls it at four points:
//   build batch:   a speculating sequence's drafts ride after its last token (append_drafts), the
//                  scheduler having marked the item `verify`;
//   run:           the trunk's forward also keeps every row's final normed state h (forward);
//   sample/accept: the verify rows are judged in order by the sampler (accept);
//   update:        the MTP rows that became computable, then the next step's drafts (draft).
// The MTP row at position q pairs the trunk's h at q - 1 with token q and gives the draft logits
// for q + 1; a chained draft feeds the MTP layer's own output back as h (docs/ARCHITECTURE.md,
// "Speculative decoding with the MTP layer").
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "engine/types.h"
#include "model/batch.h"

namespace mla {

class ModelRunner;  // engine/model_runner.h
class Sampler;      // engine/sampler.h
struct SampleResult;
struct Sequence;         // engine/sequence.h
struct SchedulerOutput;  // engine/scheduler.h
namespace kv {
class KvManager;
}

// The draft cap: at most this many drafts per sequence and step.
inline constexpr int kMaxSpeculativeTokens = 4;

// K from the JSON text; 0 for an empty text (speculation off). Throws mla::Error with a one-line
// message naming what is wrong: malformed JSON, not an object, an unknown key, a method other than
// "mtp", or num_speculative_tokens missing, not an integer or outside 1..kMaxSpeculativeTokens.
int parse_speculative_config(std::string_view text);

// How well the drafts did over some verify steps (what `mla run` and `mla bench` print): rate =
// accepted / draft tokens; mean accepted length = tokens per verify step, the accepted drafts plus
// the target's own token. Each 0 where there was nothing to divide by.
struct SpecAcceptance {
  double rate = 0;
  double mean_len = 0;
};
SpecAcceptance spec_acceptance(int64_t n_drafts, int64_t n_draft_tokens, int64_t n_accepted_tokens);

class Speculator {
 public:
  // Appends one judged token to a sequence through the engine's stop checks.
  using AppendToken = std::function<void(Sequence& seq, const SampleResult& res)>;

  // cfg is the engine's: num_speculative_tokens is read at every call (`mla bench` changes it
  // between runs). runner, cfg and kv must outlive the speculator.
  Speculator(ModelRunner& runner, const EngineConfig& cfg, kv::KvManager& kv, int n_vocab);

  // Once, with cfg.max_model_len resolved: checks num_speculative_tokens (0..kMaxSpeculativeTokens)
  // and, when it is on, that the runner has the MTP layer and a batch that holds the verify rows.
  // Throws mla::Error.
  void start();
  bool active() const { return cfg_.num_speculative_tokens > 0; }
  int configured() const { return configured_; }  // num_speculative_tokens at start()

  // A verify item's drafts appended to its tokens for the batch (accept takes them off again).
  static void append_drafts(Sequence& seq);
  // The trunk's forward for a step: logits as ModelRunner::forward, and every row's h kept for draft.
  void forward(const BatchMeta& meta, float* logits);
  // Judges a verify item's rows (its last accepted token at `position`, then its drafts; n_rows
  // logits rows from `rows`) in order, appending each token through `append`, until a draft is
  // rejected or the sequence ends; the sequence's computed length becomes what was accepted.
  void accept(Sequence& seq, const float* rows, int n_rows, int position, Sampler& sampler, const AppendToken& append);
  // At the fork of a request with n > 1 (before its siblings exist): they will share only the
  // prompt's blocks, and the MTP row after the prompt waits until each has its own copy.
  void on_fork(Sequence& first);
  // After the step's sampling, for every scheduled sequence: its MTP rows that became computable
  // (one MTP call), then drafts for those in the decode state (one more call per chained draft).
  void draft(const SchedulerOutput& plan, const BatchMeta& meta);

  // Writes the spec-decode counters (n_spec_*, mtp_seconds) into c.
  void write_counters(EngineCounters& c) const;

 private:
  struct Drafting {
    Sequence* seq;
    int h_row;  // its last row in mtp_h_out_
    int n_draft;
  };
  int draft_budget(const Sequence& seq) const;  // drafts seq may carry into the next step
  void begin_batch();
  // One sequence's MTP rows at positions q0..q1 (its tokens, or *chained_token for a single chained
  // row), attending positions 1..q1. Row q0's h input is h_first, row q > q0's h_rest + (q - q0 - 1) rows.
  void add_rows(const Sequence& s, int q0, int q1, const int32_t* chained_token, const float* h_first,
                const float* h_rest);
  void run_batch();
  // A scheduled sequence's rows that became computable (trunk rows from row0 of the step's batch),
  // and its place in drafting_ when it drafts.
  void add_computable_rows(Sequence& s, int n_computed_before, int32_t row0);
  void chain_drafts();                              // drafts 2..K, each from the previous one's MTP output
  void release_forks(const SchedulerOutput& plan);  // a fork's siblings start from its MTP state

  ModelRunner& runner_;
  const EngineConfig& cfg_;
  kv::KvManager& kv_;
  int n_vocab_;
  int n_embd_ = 0;
  int configured_ = 0;
  std::vector<float> hidden_;  // the trunk's final normed state of every batch row
  BatchMeta mtp_meta_;
  std::vector<float> mtp_h_in_, mtp_h_out_, mtp_h_prev_, mtp_logits_;
  std::vector<Drafting> drafting_;
  // Cumulative, EngineCounters' n_spec_* and mtp_seconds.
  int64_t n_drafts_ = 0, n_draft_tokens_ = 0, n_accepted_tokens_ = 0, n_steps_ = 0;
  std::vector<int64_t> n_accepted_per_pos_;
  double mtp_seconds_ = 0;
};

}  // namespace mla
