#pragma once
// The doctor's building blocks over the real forward (internal to src/doctor/): one canary run
// through a chosen path policy and prefill chunking, recorded through the forward's observation
// hook; the comparison of two runs; the absorbed-path numerics probe.
#include <cstdint>
#include <string>
#include <vector>

#include "doctor/doctor.h"
#include "model/deepseek2.h"

namespace mla::doctor {

struct RunSpec {
  std::string name;
  MlaPathPolicy policy = MlaPathPolicy::Mha;
  int chunk = 0;    // prefill tokens per forward call; 0: the whole prompt in one call
  bool dsa = true;  // sparse attention where the model has an indexer
};

struct PromptRun {
  std::vector<std::vector<float>> attn;    // [layer][position * n_head * v_head], prompt and steps
  std::vector<std::vector<float>> logits;  // [step][n_vocab]: step 0 after the prompt, i after token i-1
  std::vector<int32_t> tokens;             // the greedy tokens (or the forced ones)
  int64_t tokens_mha = 0, tokens_mqa = 0;  // what the model sent down each MLA path (PathCounters)
};

// Runs prompt and n_steps greedy steps (decoded one token per call under spec.policy). With
// `forced`, the steps feed those tokens instead of the argmax (teacher forcing), so two runs stay
// comparable at every step. `extra` (may be nullptr) also sees every trunk layer's AttentionDone.
PromptRun run_prompt(const DeepseekConfig& c, const DeepseekWeights& w, const std::vector<int32_t>& prompt,
                     const RunSpec& spec, const std::vector<int32_t>* forced, int n_steps, const DoctorOptions& opt,
                     ForwardObserver* extra = nullptr);

// Folds the differences of `other` from the reference `ref` into out (largest over calls).
void accumulate_comparison(const PromptRun& ref, const PromptRun& other, PathComparison& out);

// Per layer: the absorbed products, latent magnitudes, F16/BF16 score error and the cache
// round trip (see LayerNumerics). Largest over every observed call.
//
// Also the head pairing of W_UK: pair_energy(il)[h * n_head + g] sums (q_nope_h · W_UK_g c_kv_j)²
// over the queries and their visible rows. A trained head's query and key projections were
// learned together, so the file's pairing (g = h) carries the most score energy; a file whose
// attn_k_b heads are permuted shows it as another permutation carrying more. Computed for every
// pair up to kMaxFullHeads heads, else for g in {h, n_head-1-h, h±1} (what reverse and rotate
// need), over the last kPairQueries queries of each sequence in a call (the cost is
// n_head² · kv_lora_rank · (qk_nope + context) per query).
class NumericsProbe : public ForwardObserver {
 public:
  static constexpr int64_t kMaxFullHeads = 32;
  static constexpr int32_t kPairQueries = 8;  // pair energies from each call's last 8 queries per sequence
  NumericsProbe(const DeepseekConfig& c, const DeepseekWeights& w);
  void on_forward(const ForwardEvent& o) override;  // each trunk layer's AttentionDone
  const std::vector<LayerNumerics>& layers() const { return layers_; }
  const std::vector<double>& pair_energy(int64_t il) const { return energy_[il]; }

 private:
  const DeepseekConfig& c_;
  const DeepseekWeights& w_;
  std::vector<LayerNumerics> layers_;
  std::vector<std::vector<double>> energy_;    // [layer][h * n_head + g]; NaN where not computed
  std::vector<float> ctx_, q_lat_, row_, uk_;  // uk_: one head of W_UK as F32
  std::vector<double> pair_q_;
  void pair_energies(int64_t il, int64_t h, const float* q_nope, int64_t last);
};

// The head-order finding of one probe: the alternative order of W_UK heads (reverse, rotate by
// k) with the most score energy relative to the file's order.
struct HeadPairing {
  std::string best;   // the strongest alternative: "reversed" | "rotated by k"; "" with one head
  double ratio = 0;   // its energy / the file order's energy, in the layer where that is largest
  int64_t layer = 0;  // that layer
};
HeadPairing head_pairing(const NumericsProbe& p, int64_t n_layer, int64_t n_head);

// argmax with ties to the lowest id, and log-softmax of one logits row.
int32_t argmax(const std::vector<float>& logits);
std::vector<double> log_softmax(const float* logits, int64_t n);

}  // namespace mla::doctor
