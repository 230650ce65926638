#pragma once
// --verify-paths (ModelOptions::verify_paths): after each forward call's layer, the same layer run
// again with every sequence down the other MLA path, and how the two runs compare.
#include <cstdint>
#include <vector>

#include "model/forward_observer.h"

namespace mla {

class Deepseek2Model;

// One entry per forward call (trunk), the primary run against the same step rerun with every
// sequence down the other path. Relative differences are max |p - o| / max |p| with p the
// primary's values (the absolute difference where p is all zeros; inf for a NaN).
struct PathVerifyStep {
  int64_t n_tokens = 0;
  double logits_rel = 0;     // the largest over the call's logits rows, each row on its own
  bool greedy_agree = true;  // each logits row's argmax is the other run's too (or a near tie: doctor's rule)
  int64_t worst_layer = 0;   // the layer whose attention output differs most
  double worst_layer_rel = 0;
};
struct PathVerifyLog {
  std::vector<PathVerifyStep> steps;
  std::vector<double> layer_rel;  // [n_layer] attention output, the largest over the steps
  double max_logits_rel() const;
  bool greedy_agree() const;
};

// How two runs of the MLA paths are compared (--verify-paths and the doctor): max |ref - other| /
// max |ref| over n values (max |ref - other| when ref is all zeros; inf when a difference is not
// finite), and whether other's argmax is ref's, or within 1e-3 max |other| of it (a near tie).
double path_rel_diff(const float* ref, const float* other, int64_t n);
bool path_greedy_agrees(const float* ref, const float* other, int64_t n);

// The other run goes layer by layer beside the primary: at the primary's LayerEnd of layer il, the
// other run's layer il on its own residual (its state swapped into the model), with the primary's
// cache rows of that layer saved before and restored after; later layers never read layer il's
// rows, so this is the other policy's forward end to end on the same inputs. At StepEnd its
// logits are compared and the step logged. The model shows nothing while the other run goes.
class PathVerifier final : public ForwardObserver {
 public:
  explicit PathVerifier(Deepseek2Model& m);
  void on_forward(const ForwardEvent& e) override;
  const PathVerifyLog& log() const { return log_; }

 private:
  void rerun_layer(int64_t il, const BatchMeta& b, LatentCache& cache);
  void finish_step(const BatchMeta& b, const float* logits);
  // Exchanges the model's residual and DSA selection with the other run's, and mutes it / flips
  // its paths (Deepseek2Model::other_run_).
  void swap_run_state();

  Deepseek2Model& m_;
  std::vector<float> attn_ref_;  // the primary's attention output of the layer being rerun
  std::vector<float> x_other_;   // the other run's residual stream
  std::vector<int32_t> sel_other_, sel_count_other_;
  std::vector<float> logits_other_;
  std::vector<uint8_t> saved_rows_;     // the primary's cache rows of the layer being rerun
  std::vector<double> layer_rel_step_;  // [n_layer] this step's attention output differences
  PathVerifyStep step_;
  int64_t n_rows_other_ = 0;  // rows the other run carries on
  PathVerifyLog log_;
};

}  // namespace mla
