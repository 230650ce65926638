// --verify-paths (ModelOptions::verify_paths): the other-path rerun of a forward call, beside the
// primary layer by layer (see Deepseek2Model::verify_layer), and how two runs are compared.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "model/deepseek2.h"
#include "util/log.h"

namespace mla {

double path_rel_diff(const float* ref, const float* other, int64_t n) {
  double diff = 0, mag = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = std::fabs(static_cast<double>(ref[i]) - other[i]);
    if (!std::isfinite(d)) return std::numeric_limits<double>::infinity();
    diff = std::max(diff, d);
    mag = std::max(mag, static_cast<double>(std::fabs(ref[i])));
  }
  return mag > 0 ? diff / mag : diff;
}

bool path_greedy_agrees(const float* ref, const float* other, int64_t n) {
  const int64_t want = std::max_element(ref, ref + n) - ref, got = std::max_element(other, other + n) - other;
  double mag = 0;
  for (int64_t i = 0; i < n; ++i) mag = std::max(mag, static_cast<double>(std::fabs(other[i])));
  return got == want || other[got] - other[want] <= 1e-3 * mag;
}

double PathVerifyLog::max_logits_rel() const {
  double m = 0;
  for (const auto& s : steps) m = std::max(m, s.logits_rel);
  return m;
}

bool PathVerifyLog::greedy_agree() const {
  return std::all_of(steps.begin(), steps.end(), [](const PathVerifyStep& s) { return s.greedy_agree; });
}

void Deepseek2Model::swap_run_state() {
  std::swap(x_, x_other_);
  std::swap(sel_, sel_other_);
  std::swap(sel_count_, sel_count_other_);
  other_run_ = !other_run_;
}

int64_t Deepseek2Model::verify_layer(int64_t il, const BatchMeta& b, LatentCache& cache, int64_t n_rows,
                                     PathVerifyStep& step) {
  const int64_t T = b.n_tokens(), W = c_.n_head * c_.v_head;
  // The primary's attention output of this layer (the FFN does not touch attn_), and its cache
  // rows of this layer at the step's slots, which the other run overwrites with its own.
  std::copy_n(attn_.data(), T * W, attn_ref_.data());
  const int lay = static_cast<int>(il);
  const int64_t rb = cache.row_bytes(), ib = cache.index_row_bytes(lay);
  saved_rows_.resize(static_cast<size_t>(T * (rb + ib)));
  for (int64_t t = 0; t < T; ++t) {
    std::memcpy(saved_rows_.data() + t * rb, cache.row_data(lay, b.slot_mapping[t]), rb);
    if (ib > 0) std::memcpy(saved_rows_.data() + T * rb + t * ib, cache.index_row_data(lay, b.slot_mapping[t]), ib);
  }
  swap_run_state();
  n_rows = trunk_layer(il, b, cache, n_rows, /*keep_rows=*/false);
  swap_run_state();
  for (int64_t t = T - 1; t >= 0; --t) {  // backwards: a slot listed twice gets its first (primary) row
    std::memcpy(cache.row_data(lay, b.slot_mapping[t]), saved_rows_.data() + t * rb, rb);
    if (ib > 0) std::memcpy(cache.index_row_data(lay, b.slot_mapping[t]), saved_rows_.data() + T * rb + t * ib, ib);
  }
  const double rel = path_rel_diff(attn_ref_.data(), attn_.data(), T * W);
  verify_log_.layer_rel[il] = std::max(verify_log_.layer_rel[il], rel);
  if (il == 0 || rel > step.worst_layer_rel) step.worst_layer = il, step.worst_layer_rel = rel;
  layer_rel_step_.resize(c_.n_layer);
  layer_rel_step_[il] = rel;
  return n_rows;
}

void Deepseek2Model::verify_finish_step(const BatchMeta& b, const float* logits, PathVerifyStep& step) {
  const int64_t V = c_.n_vocab;
  if (logits)
    for (size_t i = 0; i < b.logits_rows.size(); ++i) {
      const float* p = logits + i * V;
      const float* o = logits_other_.data() + i * V;
      step.logits_rel = std::max(step.logits_rel, path_rel_diff(p, o, V));
      step.greedy_agree = step.greedy_agree && path_greedy_agrees(p, o, V);
    }
  std::string layers;
  for (int64_t il = 0; il < c_.n_layer; ++il) layers += fmt::format("{}{:.1e}", il ? " " : "", layer_rel_step_[il]);
  log().info(
      "verify-paths step={} tokens={} policy={} (each sequence rerun down its other path) logits_rel={} greedy={} "
      "worst=blk.{} {:.3e} layers=[{}]",
      verify_log_.steps.size(), step.n_tokens, mla_path_policy_name(b.policy),
      logits ? fmt::format("{:.3e}", step.logits_rel) : std::string("n/a"), step.greedy_agree ? "same" : "DIFFER",
      step.worst_layer, step.worst_layer_rel, layers);
  verify_log_.steps.push_back(step);
}

}  // namespace mla
