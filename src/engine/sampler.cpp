#include "engine/sampler.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

#include "grammar/token_mask.h"

namespace mla {
namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// More likely first; equal values: lower id first.
inline bool more_likely(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

// Temperatures this small are greedy (as vLLM's _SAMPLING_EPS).
constexpr float kGreedyBelow = 1e-5f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

}  // namespace

Rng::Rng(uint64_t seed) {
  for (auto& s : s_) s = splitmix64(seed);
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

void PenaltyState::set_prompt(std::span<const int32_t> prompt) {
  prompt_.assign(prompt.begin(), prompt.end());
  std::sort(prompt_.begin(), prompt_.end());
  prompt_.erase(std::unique(prompt_.begin(), prompt_.end()), prompt_.end());
}

void PenaltyState::add_output(int32_t token) { ++output_counts_[token]; }

Sampler::Sampler(int n_vocab) : n_vocab_(n_vocab), work_(n_vocab), probs_(n_vocab) { cand_.reserve(n_vocab); }

void Sampler::process(const float* logits, const SamplingParams& p, const PenaltyState& pen, int n_generated,
                      std::span<const int32_t> eos_ids, std::span<const uint32_t> mask) {
  const int V = n_vocab_;
  std::copy(logits, logits + V, work_.begin());
  if (!mask.empty()) apply_token_mask(work_, mask);
  if (n_generated < p.min_tokens && mask.empty()) {
    if (!p.ignore_eos)
      for (int32_t t : eos_ids) work_[t] = kNegInf;
    for (int32_t t : p.stop_token_ids) work_[t] = kNegInf;
  }
  for (const auto& [t, bias] : p.logit_bias) work_[t] += bias;
  if (p.repetition_penalty != 1.0f) {
    const float r = p.repetition_penalty;
    auto penalize = [&](int32_t t) { work_[t] = work_[t] > 0 ? work_[t] / r : work_[t] * r; };
    const auto& prompt = pen.prompt_tokens();
    for (int32_t t : prompt) penalize(t);
    for (const auto& [t, count] : pen.output_counts())
      if (!std::binary_search(prompt.begin(), prompt.end(), t)) penalize(t);
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    for (const auto& [t, count] : pen.output_counts())
      work_[t] -= p.frequency_penalty * static_cast<float>(count) + p.presence_penalty;
  }
}

int32_t Sampler::argmax() const {
  int32_t best = 0;
  for (int32_t i = 1; i < n_vocab_; ++i)
    if (work_[i] > work_[best]) best = i;
  return best;
}

bool Sampler::greedy(const SamplingParams& p) const {
  const float m = *std::max_element(work_.begin(), work_.end());
  return p.temperature < kGreedyBelow || !std::isfinite(m);
}

double Sampler::distribution(const SamplingParams& p) {
  const int V = n_vocab_;
  const float m = *std::max_element(work_.begin(), work_.end());
  const float inv_t = 1.0f / p.temperature;
  // Unnormalized probabilities: the most likely token has 1, so min_p compares directly.
  for (int i = 0; i < V; ++i) {
    float x = std::exp((work_[i] - m) * inv_t);
    probs_[i] = x >= p.min_p ? x : 0.0f;
  }
  cand_.clear();
  if (p.top_k <= 0 && p.top_p >= 1.0f) {
    // Token-id order.
    double total = 0;
    for (int i = 0; i < V; ++i) {
      total += probs_[i];
      if (probs_[i] > 0) cand_.emplace_back(probs_[i], i);
    }
    if (cand_.empty()) {
      cand_.emplace_back(1.0f, argmax());
      total = 1;
    }
    return total;
  }
  // Most likely first, cut by top_k and top_p.
  for (int i = 0; i < V; ++i)
    if (probs_[i] > 0) cand_.emplace_back(probs_[i], i);
  if (cand_.empty()) cand_.emplace_back(1.0f, argmax());
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < cand_.size()) {
    std::nth_element(cand_.begin(), cand_.begin() + p.top_k, cand_.end(), more_likely);
    cand_.resize(p.top_k);
  }
  std::sort(cand_.begin(), cand_.end(), more_likely);
  double total = 0;
  for (const auto& c : cand_) total += c.first;
  if (p.top_p < 1.0f) {
    const double keep_mass = static_cast<double>(p.top_p) * total;
    double before = 0;
    size_t n_keep = 0;
    while (n_keep < cand_.size() && before < keep_mass) before += cand_[n_keep++].first;
    cand_.resize(std::max<size_t>(n_keep, 1));
    total = before;
  }
  return total;
}

int32_t Sampler::draw(double total, Rng& rng, int32_t skip) const {
  const double target = rng.uniform() * total;
  double acc = 0;
  int32_t token = -1;
  for (const auto& c : cand_) {
    if (c.second == skip) continue;
    token = c.second;
    acc += c.first;
    if (target < acc) break;
  }
  return token;
}

std::optional<SampleLogprobs> Sampler::logprobs(const float* logits, const SamplingParams& p, int32_t token) {
  if (!p.logprobs) return std::nullopt;
  return token_logprobs(logits, token, *p.logprobs);
}

SampleLogprobs Sampler::token_logprobs(const float* logits, int32_t token, int k) {
  const int V = n_vocab_;
  const float m = *std::max_element(logits, logits + V);
  double sum = 0;
  int n_above = 0;
  for (int i = 0; i < V; ++i) {
    sum += std::exp(static_cast<double>(logits[i]) - m);
    n_above += logits[i] > logits[token] ? 1 : 0;
  }
  const double lse = m + std::log(sum);
  SampleLogprobs lp;
  lp.sampled = {token, static_cast<float>(logits[token] - lse)};
  lp.rank = 1 + n_above;
  k = std::min(k, V);
  if (k > 0) {
    cand_.clear();
    for (int i = 0; i < V; ++i) cand_.emplace_back(logits[i], i);
    std::partial_sort(cand_.begin(), cand_.begin() + k, cand_.end(), more_likely);
    for (int i = 0; i < k; ++i) lp.top.push_back({cand_[i].second, static_cast<float>(cand_[i].first - lse)});
  }
  return lp;
}

SampleResult Sampler::sample(const float* logits, const SamplingParams& p, const PenaltyState& pen, int n_generated,
                             std::span<const int32_t> eos_ids, Rng& rng, std::span<const uint32_t> mask) {
  process(logits, p, pen, n_generated, eos_ids, mask);
  SampleResult res;
  if (greedy(p)) {
    res.token = argmax();
  } else {
    res.token = draw(distribution(p), rng);
    assert(res.token >= 0);
  }
  res.logprobs = logprobs(logits, p, res.token);
  return res;
}

SampleResult Sampler::sample_draft(const float* logits, const SamplingParams& p, const PenaltyState& pen,
                                   int n_generated, std::span<const int32_t> eos_ids, Rng& rng, int32_t draft,
                                   bool& accepted) {
  process(logits, p, pen, n_generated, eos_ids, {});
  SampleResult res;
  if (greedy(p)) {
    res.token = argmax();
    accepted = res.token == draft;
  } else {
    // A one-hot draft: accept with probability q(draft) under the target distribution q; otherwise
    // draw from q without the draft, renormalized (max(0, q - onehot) normalized). The result is
    // distributed as q.
    const double total = distribution(p);
    double w_draft = 0;
    for (const auto& c : cand_)
      if (c.second == draft) w_draft = c.first;
    accepted = rng.uniform() * total < w_draft;
    if (accepted) {
      res.token = draft;
    } else {
      double rest = 0;
      for (const auto& c : cand_)
        if (c.second != draft) rest += c.first;
      res.token = draw(rest, rng, draft);
      assert(res.token >= 0);
    }
  }
  res.logprobs = logprobs(logits, p, res.token);
  return res;
}

}  // namespace mla
