// --verify-paths (ModelOptions::verify_paths): the other-path rerun of a forward call, beside the
// primary layer by layer (PathVerifier, model/path_verify.h), and how two runs are compared.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "model/path_verify.h"

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

PathVerifier::PathVerifier(Deepseek2Model& m) : m_(m) {
  attn_ref_.resize(m.attn_.size());
  x_other_.resize(m.x_.size());
  sel_other_.resize(m.sel_.size());
  sel_count_other_.resize(m.sel_count_.size());
  log_.layer_rel.assign(m.c_.n_layer, 0.0);
}

void PathVerifier::on_forward(const ForwardEvent& e) {
  if (e.mtp) return;  // the trunk only
  switch (e.point) {
    case ForwardPoint::StepBegin:  // the other run starts from the same embedding rows
      step_ = {};
      step_.n_tokens = e.batch->n_tokens();
      n_rows_other_ = step_.n_tokens;
      std::copy_n(m_.x_.data(), step_.n_tokens * m_.c_.n_embd, x_other_.data());
      break;
    case ForwardPoint::LayerEnd:
      rerun_layer(e.layer, *e.batch, *e.cache);
      break;
    case ForwardPoint::StepEnd:
      finish_step(*e.batch, e.logits);
      break;
    default:
      break;
  }
}

void PathVerifier::swap_run_state() {
  std::swap(m_.x_, x_other_);
  std::swap(m_.sel_, sel_other_);
  std::swap(m_.sel_count_, sel_count_other_);
  m_.other_run_ = !m_.other_run_;
}

void PathVerifier::rerun_layer(int64_t il, const BatchMeta& b, LatentCache& cache) {
  const int64_t T = b.n_tokens(), W = m_.c_.n_head * m_.c_.v_head;
  // The primary's attention output of this layer (the FFN does not touch attn_), and its cache
  // rows of this layer at the step's slots, which the other run overwrites with its own.
  std::copy_n(m_.attn_.data(), T * W, attn_ref_.data());
  const int lay = static_cast<int>(il);
  const int64_t rb = cache.row_bytes(), ib = cache.index_row_bytes(lay);
  saved_rows_.resize(static_cast<size_t>(T * (rb + ib)));
  for (int64_t t = 0; t < T; ++t) {
    std::memcpy(saved_rows_.data() + t * rb, cache.row_data(lay, b.slot_mapping[t]), rb);
    if (ib > 0) std::memcpy(saved_rows_.data() + T * rb + t * ib, cache.index_row_data(lay, b.slot_mapping[t]), ib);
  }
  swap_run_state();
  n_rows_other_ = m_.block(m_.w_.layers[il], il, m_.sparse(), b, cache, n_rows_other_, /*keep_rows=*/false);
  swap_run_state();
  for (int64_t t = T - 1; t >= 0; --t) {  // backwards: a slot listed twice gets its first (primary) row
    std::memcpy(cache.row_data(lay, b.slot_mapping[t]), saved_rows_.data() + t * rb, rb);
    if (ib > 0) std::memcpy(cache.index_row_data(lay, b.slot_mapping[t]), saved_rows_.data() + T * rb + t * ib, ib);
  }
  const double rel = path_rel_diff(attn_ref_.data(), m_.attn_.data(), T * W);
  log_.layer_rel[il] = std::max(log_.layer_rel[il], rel);
  if (il == 0 || rel > step_.worst_layer_rel) step_.worst_layer = il, step_.worst_layer_rel = rel;
  layer_rel_step_.resize(m_.c_.n_layer);
  layer_rel_step_[il] = rel;
}

void PathVerifier::finish_step(const BatchMeta& b, const float* logits) {
  const int64_t V = m_.c_.n_vocab;
  // The other run's logits rows (it never keeps every row: a row's values do not depend on the others).
  if (logits && n_rows_other_ > 0) {
    logits_other_.resize(static_cast<size_t>(n_rows_other_) * V);
    swap_run_state();
    m_.head(m_.w_.output_norm, m_.w_.output, n_rows_other_, nullptr, nullptr, logits_other_.data());
    swap_run_state();
    for (size_t i = 0; i < b.logits_rows.size(); ++i) {
      const float* p = logits + i * V;
      const float* o = logits_other_.data() + i * V;
      step_.logits_rel = std::max(step_.logits_rel, path_rel_diff(p, o, V));
      step_.greedy_agree = step_.greedy_agree && path_greedy_agrees(p, o, V);
    }
  }
  std::string layers;
  for (int64_t il = 0; il < m_.c_.n_layer; ++il) layers += fmt::format("{}{:.1e}", il ? " " : "", layer_rel_step_[il]);
  mla::log().info(
      "verify-paths step={} tokens={} policy={} (each sequence rerun down its other path) logits_rel={} greedy={} "
      "worst=blk.{} {:.3e} layers=[{}]",
      log_.steps.size(), step_.n_tokens, mla_path_policy_name(b.policy),
      logits ? fmt::format("{:.3e}", step_.logits_rel) : std::string("n/a"), step_.greedy_agree ? "same" : "DIFFER",
      step_.worst_layer, step_.worst_layer_rel, layers);
  log_.steps.push_back(step_);
}

}  // namespace mla
