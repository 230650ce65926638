#include "kernels/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/ops.h"

namespace mla {

void moe_route(const MoeRouting& r, const float* logits, int32_t* experts, float* weights, float* scratch) {
  const int n = r.n_expert;
  float* scores = scratch;          // [n_expert]
  float* choice = scratch + n;      // [n_expert]
  float* group_score = choice + n;  // [n_group]
  if (r.gating == MoeGating::Softmax) {
    std::copy(logits, logits + n, scores);
    softmax(scores, n);
  } else {
    for (int e = 0; e < n; ++e) scores[e] = 1.0f / (1.0f + std::exp(-logits[e]));
  }
  // A NaN score (NaN router logits) never wins a comparison: it ranks below every number, so the
  // picks below are always real experts.
  for (int e = 0; e < n; ++e) {
    choice[e] = r.bias ? scores[e] + r.bias[e] : scores[e];
    if (std::isnan(choice[e])) choice[e] = -INFINITY;
  }

  if (r.n_group > 1) {
    const int per_group = n / r.n_group;
    for (int g = 0; g < r.n_group; ++g) {
      float best = -INFINITY, second = -INFINITY;
      for (int e = g * per_group; e < (g + 1) * per_group; ++e) {
        float v = choice[e];
        if (v > best) {
          second = best;
          best = v;
        } else if (v > second) {
          second = v;
        }
      }
      group_score[g] = best + second;
    }
    // Keep the n_group_used best groups (ties: lower group index); exclude the others' experts.
    for (int kept = 0; kept < r.n_group_used; ++kept) {
      int arg = -1;
      for (int g = 0; g < r.n_group; ++g)
        if (group_score[g] != INFINITY && (arg < 0 || group_score[g] > group_score[arg])) arg = g;
      group_score[arg] = INFINITY;  // marks "kept"
    }
    for (int g = 0; g < r.n_group; ++g)
      if (group_score[g] != INFINITY)
        for (int e = g * per_group; e < (g + 1) * per_group; ++e) choice[e] = -INFINITY;
  }

  // Top-k by repeated arg-max (k is small); a picked expert is marked with NaN.
  for (int k = 0; k < r.n_expert_used; ++k) {
    int arg = -1;
    for (int e = 0; e < n; ++e)
      if (!std::isnan(choice[e]) && (arg < 0 || choice[e] > choice[arg])) arg = e;
    experts[k] = arg;
    choice[arg] = NAN;  // picked (the scores above hold no NaN)
  }
  std::sort(experts, experts + r.n_expert_used);
  float sum = 0;
  for (int k = 0; k < r.n_expert_used; ++k) sum += (weights[k] = scores[experts[k]]);
  for (int k = 0; k < r.n_expert_used; ++k)
    weights[k] = (r.norm_weights ? weights[k] / sum : weights[k]) * r.weights_scale;
}

void moe_route_ref(const MoeRouting& r, const float* logits, int32_t* experts, float* weights) {
  const int n = r.n_expert;
  std::vector<double> scores(n), choice(n);
  if (r.gating == MoeGating::Softmax) {
    double mx = *std::max_element(logits, logits + n), sum = 0;
    for (int e = 0; e < n; ++e) sum += (scores[e] = std::exp(logits[e] - mx));
    for (auto& s : scores) s /= sum;
  } else {
    for (int e = 0; e < n; ++e) scores[e] = 1.0 / (1.0 + std::exp(-static_cast<double>(logits[e])));
  }
  for (int e = 0; e < n; ++e) choice[e] = scores[e] + (r.bias ? r.bias[e] : 0.0);
  if (r.n_group > 1) {
    const int per_group = n / r.n_group;
    std::vector<std::pair<double, int>> groups;
    for (int g = 0; g < r.n_group; ++g) {
      std::vector<double> v(choice.begin() + g * per_group, choice.begin() + (g + 1) * per_group);
      std::sort(v.begin(), v.end(), std::greater<>());
      groups.push_back({v[0] + v[1], g});
    }
    std::stable_sort(groups.begin(), groups.end(), [](auto& a, auto& b) { return a.first > b.first; });
    std::vector<bool> keep(r.n_group, false);
    for (int k = 0; k < r.n_group_used; ++k) keep[groups[k].second] = true;
    for (int e = 0; e < n; ++e)
      if (!keep[e / per_group]) choice[e] = -INFINITY;
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return choice[a] > choice[b]; });
  std::sort(order.begin(), order.begin() + r.n_expert_used);
  double sum = 0;
  for (int k = 0; k < r.n_expert_used; ++k) sum += scores[order[k]];
  for (int k = 0; k < r.n_expert_used; ++k) {
    experts[k] = order[k];
    double w = scores[order[k]];
    if (r.norm_weights) w /= sum;
    weights[k] = static_cast<float>(w * r.weights_scale);
  }
}

}  // namespace mla
