// DeepSeek-V4 forward pass: the residual streams, the hyper-connections, the MoE and the head.
// Attention and its compressors are in deepseek4_attention.cpp. docs/DEEPSEEK-V4.md §1.
#include "model/deepseek4.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "model/deepseek4_internal.h"
#include "quant/quant.h"
#include "util/error.h"

namespace mla {

struct Deepseek4Model::Mix {
  std::vector<float> pre, post, comb;  // [n_tok][n_hc], [n_tok][n_hc], [n_tok][n_hc][n_hc] (row i = source)
};

Deepseek4Model::Deepseek4Model(const Deepseek4Config& c, const Deepseek4Weights& w, int n_threads)
    : c_(c), w_(w), pool_(n_threads) {}

namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// Sinkhorn–Knopp on one n x n matrix (row-major, m[i * n + j]): softmax over each row plus eps,
// one column normalisation, then (iters - 1) row/column pairs, each sum with eps added.
void sinkhorn(float* m, int64_t n, int64_t iters, float eps) {
  for (int64_t i = 0; i < n; ++i) {
    float* row = m + i * n;
    const float mx = *std::max_element(row, row + n);
    float sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += (row[j] = std::exp(row[j] - mx));
    for (int64_t j = 0; j < n; ++j) row[j] = row[j] / sum + eps;
  }
  auto cols = [&] {
    for (int64_t j = 0; j < n; ++j) {
      float sum = eps;
      for (int64_t i = 0; i < n; ++i) sum += m[i * n + j];
      for (int64_t i = 0; i < n; ++i) m[i * n + j] /= sum;
    }
  };
  auto rows = [&] {
    for (int64_t i = 0; i < n; ++i) {
      float sum = eps;
      for (int64_t j = 0; j < n; ++j) sum += m[i * n + j];
      for (int64_t j = 0; j < n; ++j) m[i * n + j] /= sum;
    }
  };
  cols();
  for (int64_t it = 1; it < iters; ++it) {
    rows();
    cols();
  }
}

// torch.nn.functional.softplus (beta 1, threshold 20), then sqrt: DeepSeek-V4's router score.
float sqrt_softplus(float x) { return std::sqrt(x > 20.0f ? x : std::log1p(std::exp(x))); }

}  // namespace

// mix = fn · RMS(flatten(streams)) per token; pre/post/comb from it; x = Σ_i pre_i · stream_i.
void Deepseek4Model::hc_collapse(const Ds4HyperConn& hc, const float* streams, int64_t n_tok, Mix& mix, float* x) {
  const int64_t n = c_.hc_mult, D = c_.n_embd, nD = n * D, n_mix = hc.fn.n_rows;
  std::vector<float> normed(static_cast<size_t>(n_tok * nD)), raw(static_cast<size_t>(n_tok * n_mix));
  for (int64_t t = 0; t < n_tok; ++t)
    ds4::rms(streams + t * nD, nullptr, normed.data() + t * nD, nD, static_cast<float>(c_.rms_eps));
  matmul(hc.fn, normed.data(), nD, n_tok, raw.data(), n_mix, pool_, scratch_);
  const float eps = static_cast<float>(c_.hc_eps);
  mix.pre.assign(static_cast<size_t>(n_tok * n), 0);
  mix.post.assign(static_cast<size_t>(n_tok * n), 0);
  mix.comb.assign(static_cast<size_t>(n_tok * n * n), 0);
  for (int64_t t = 0; t < n_tok; ++t) {
    const float* r = raw.data() + t * n_mix;
    float* pre = mix.pre.data() + t * n;
    for (int64_t i = 0; i < n; ++i) pre[i] = sigmoid(r[i] * hc.scale[0] + hc.base[i]) + eps;
    if (n_mix > n) {  // a block's hyper-connection (the hyper head has pre only)
      float* post = mix.post.data() + t * n;
      float* comb = mix.comb.data() + t * n * n;
      for (int64_t i = 0; i < n; ++i) post[i] = 2.0f * sigmoid(r[n + i] * hc.scale[1] + hc.base[n + i]);
      for (int64_t k = 0; k < n * n; ++k) comb[k] = r[2 * n + k] * hc.scale[2] + hc.base[2 * n + k];
      sinkhorn(comb, n, c_.hc_sinkhorn_iters, eps);
    }
    float* xt = x + t * D;
    std::fill(xt, xt + D, 0.0f);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t e = 0; e < D; ++e) xt[e] += pre[i] * streams[t * nD + i * D + e];
  }
}

// streams'_j = post_j · y + Σ_i comb[i][j] · streams_i, in place.
void Deepseek4Model::hc_expand(const Mix& mix, const float* y, int64_t n_tok, float* streams) {
  const int64_t n = c_.hc_mult, D = c_.n_embd;
  std::vector<float> old(static_cast<size_t>(n * D));
  for (int64_t t = 0; t < n_tok; ++t) {
    float* s = streams + t * n * D;
    std::copy(s, s + n * D, old.begin());
    const float* post = mix.post.data() + t * n;
    const float* comb = mix.comb.data() + t * n * n;
    for (int64_t j = 0; j < n; ++j)
      for (int64_t e = 0; e < D; ++e) {
        float acc = post[j] * y[t * D + e];
        for (int64_t i = 0; i < n; ++i) acc += comb[i * n + j] * old[i * D + e];
        s[j * D + e] = acc;
      }
  }
}

// y = down · (silu(min(gate·x, L)) ⊙ clamp(up·x, -L, L)) for n_tok rows of x.
void Deepseek4Model::expert_ffn(const WeightMatrix& gate, const WeightMatrix& up, const WeightMatrix& down, float limit,
                                const float* x, int64_t n_tok, float* y) {
  const int64_t D = c_.n_embd, F = gate.n_rows;
  std::vector<float> g(static_cast<size_t>(n_tok * F)), u(static_cast<size_t>(n_tok * F));
  matmul_multi({{&gate, g.data(), F}, {&up, u.data(), F}}, x, D, n_tok, D, pool_, scratch_);
  for (size_t i = 0; i < g.size(); ++i) {
    const float gi = std::min(g[i], limit), ui = std::clamp(u[i], -limit, limit);
    g[i] = gi / (1.0f + std::exp(-gi)) * ui;
  }
  matmul(down, g.data(), F, n_tok, y, D, pool_, scratch_);
}

// Routed experts (hash table or top-k of score + bias) weighted by the normalised sqrtsoftplus
// scores times expert_weights_scale, plus the shared expert. Tokens are grouped by expert.
void Deepseek4Model::moe(int64_t il, const float* x, const std::vector<int32_t>& tokens, float* out) {
  const Ds4LayerWeights& L = w_.layers[il];
  const int64_t n_tok = static_cast<int64_t>(tokens.size()), D = c_.n_embd, X = c_.n_expert, k = c_.n_expert_used;
  std::vector<float> logits(static_cast<size_t>(n_tok * X));
  matmul(L.ffn_gate_inp, x, D, n_tok, logits.data(), X, pool_, scratch_);
  std::vector<std::vector<std::pair<int64_t, float>>> by_expert(static_cast<size_t>(X));  // (token, weight)
  std::vector<int32_t> ids(static_cast<size_t>(X));
  for (int64_t t = 0; t < n_tok; ++t) {
    float* s = logits.data() + t * X;
    for (int64_t e = 0; e < X; ++e) s[e] = sqrt_softplus(s[e]);
    const int32_t* chosen = nullptr;
    if (c_.is_hash_layer(il)) {
      chosen = L.tid2eid.data() + static_cast<int64_t>(tokens[t]) * k;
    } else {
      std::iota(ids.begin(), ids.end(), 0);
      std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
        const float sa = s[a] + L.exp_probs_b[a], sb = s[b] + L.exp_probs_b[b];
        return sa > sb || (sa == sb && a < b);
      });
      chosen = ids.data();
    }
    float sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += s[chosen[j]];
    const float scale = static_cast<float>(c_.expert_weights_scale) / (sum + 1e-20f);
    for (int64_t j = 0; j < k; ++j) by_expert[chosen[j]].emplace_back(t, s[chosen[j]] * scale);
  }
  const int64_t F = c_.n_ff_exp;
  const float limit = c_.swiglu_limit[il];
  if (L.ffn_gate_shexp.n_rows > 0)
    expert_ffn(L.ffn_gate_shexp, L.ffn_up_shexp, L.ffn_down_shexp, c_.swiglu_limit_shared[il], x, n_tok, out);
  else
    std::fill(out, out + n_tok * D, 0.0f);
  std::vector<float> xs, ys;
  for (int64_t e = 0; e < X; ++e) {
    const auto& routed = by_expert[e];
    if (routed.empty()) continue;
    const int64_t n = static_cast<int64_t>(routed.size());
    xs.resize(static_cast<size_t>(n * D));
    ys.resize(static_cast<size_t>(n * D));
    for (int64_t r = 0; r < n; ++r)
      std::copy(x + routed[r].first * D, x + (routed[r].first + 1) * D, xs.data() + r * D);
    expert_ffn(L.ffn_gate_exps.rows(e * F, F), L.ffn_up_exps.rows(e * F, F), L.ffn_down_exps.rows(e * D, D), limit,
               xs.data(), n, ys.data());
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < D; ++i) out[routed[r].first * D + i] += routed[r].second * ys[r * D + i];
  }
}

// Hyper head (pre only), output norm, lm head.
void Deepseek4Model::head(const float* streams, int64_t n_tok, float* logits) {
  const int64_t D = c_.n_embd;
  Mix mix;
  std::vector<float> h(static_cast<size_t>(n_tok * D));
  hc_collapse(w_.hc_head, streams, n_tok, mix, h.data());
  for (int64_t t = 0; t < n_tok; ++t)
    ds4::rms(h.data() + t * D, w_.output_norm.data(), h.data() + t * D, D, static_cast<float>(c_.rms_eps));
  matmul(w_.output, h.data(), D, n_tok, logits, c_.n_vocab, pool_, scratch_);
}

Deepseek4Cache Deepseek4Model::make_cache() const {
  Deepseek4Cache cache;
  cache.layers.resize(static_cast<size_t>(c_.n_layer));
  return cache;
}

void Deepseek4Model::prefill(const std::vector<int32_t>& tokens, float* logits) {
  Deepseek4Cache cache = make_cache();
  forward(tokens, cache, logits);
}

void Deepseek4Model::forward(const std::vector<int32_t>& tokens, Deepseek4Cache& cache, float* logits) {
  std::vector<int32_t> rows(tokens.size());
  std::iota(rows.begin(), rows.end(), 0);
  forward(tokens, cache, logits, rows);
}

void Deepseek4Model::forward(const std::vector<int32_t>& tokens, Deepseek4Cache& cache, float* logits,
                             std::span<const int32_t> rows) {
  const Seq seq{tokens, &cache, rows};
  forward_batch({&seq, 1}, logits);
}

void Deepseek4Model::forward_batch(std::span<const Seq> seqs, float* logits) {
  const int64_t D = c_.n_embd, n = c_.hc_mult;
  std::vector<Chunk> chunks;
  std::vector<Deepseek4Cache*> caches;
  std::vector<int32_t> tokens, wanted;  // every row's token; the batch rows the head runs on
  for (const Seq& s : seqs) {
    if (s.tokens.empty()) continue;
    for (int32_t id : s.tokens)
      if (id < 0 || id >= c_.n_vocab) fail("deepseek4: token id {} outside the vocabulary (0..{})", id, c_.n_vocab - 1);
    const auto row0 = static_cast<int64_t>(tokens.size());
    chunks.push_back({s.cache->n_past, static_cast<int64_t>(s.tokens.size()), row0});
    caches.push_back(s.cache);
    tokens.insert(tokens.end(), s.tokens.begin(), s.tokens.end());
    for (int32_t r : s.rows) wanted.push_back(static_cast<int32_t>(row0 + r));
  }
  const auto n_tok = static_cast<int64_t>(tokens.size());
  if (n_tok == 0) return;
  std::vector<float> streams(static_cast<size_t>(n_tok * n * D)), x(static_cast<size_t>(n_tok * D)),
      h(static_cast<size_t>(n_tok * D)), y(static_cast<size_t>(n_tok * D));
  for (int64_t t = 0; t < n_tok; ++t) {  // the embedding, copied into every stream
    dequantize_row(w_.token_embd.type, w_.token_embd.row(tokens[t]), x.data(), D);
    for (int64_t i = 0; i < n; ++i) std::copy(x.begin(), x.begin() + D, streams.begin() + (t * n + i) * D);
  }
  const float eps = static_cast<float>(c_.rms_eps);
  Mix mix;
  for (int64_t il = 0; il < c_.n_layer; ++il) {
    const Ds4LayerWeights& L = w_.layers[il];
    hc_collapse(L.hc_attn, streams.data(), n_tok, mix, x.data());
    for (int64_t t = 0; t < n_tok; ++t) ds4::rms(x.data() + t * D, L.attn_norm.data(), h.data() + t * D, D, eps);
    attention(il, h.data(), chunks, caches, n_tok, y.data());
    hc_expand(mix, y.data(), n_tok, streams.data());
    hc_collapse(L.hc_ffn, streams.data(), n_tok, mix, x.data());
    for (int64_t t = 0; t < n_tok; ++t) ds4::rms(x.data() + t * D, L.ffn_norm.data(), h.data() + t * D, D, eps);
    moe(il, h.data(), tokens, y.data());
    hc_expand(mix, y.data(), n_tok, streams.data());
  }
  for (size_t i = 0; i < chunks.size(); ++i) caches[i]->n_past += chunks[i].n_tok;
  if (wanted.empty()) return;
  if (static_cast<int64_t>(wanted.size()) < n_tok) {  // the wanted tokens' streams, packed
    std::vector<float> picked(wanted.size() * static_cast<size_t>(n * D));
    for (size_t i = 0; i < wanted.size(); ++i)
      std::copy_n(streams.begin() + wanted[i] * n * D, n * D, picked.begin() + static_cast<int64_t>(i) * n * D);
    streams.swap(picked);
  }
  head(streams.data(), static_cast<int64_t>(wanted.size()), logits);
}

Ds4StateBound deepseek4_state_bound(const Deepseek4Config& c) {
  const int64_t d = c.head_dim, ci = c.indexer_head_dim;
  int64_t fixed = 0;  // floats
  double per_token = 0;
  for (int64_t il = 0; il < c.n_layer; ++il) {
    fixed += (c.n_window - 1) * d;
    const int64_t m = c.compress_ratio[il];
    if (m == 0) continue;
    const bool csa = c.attn_kind(il) == Ds4Attn::Csa;
    const int64_t n_series = csa ? 2 : 1;
    fixed += 2 * m * n_series * d;  // open window: kv and gate
    per_token += 2.0 * static_cast<double>(d) / static_cast<double>(m);
    if (!csa) continue;
    fixed += 2 * m * d + 2 * m * 2 * ci + 2 * m * ci;  // series A; the indexer's open window and series A
    per_token += 2.0 * static_cast<double>(ci) / static_cast<double>(m);
  }
  return {fixed * static_cast<int64_t>(sizeof(float)), per_token * sizeof(float)};
}

int64_t deepseek4_state_bytes(const Deepseek4Cache& cache) {
  auto comp = [](const Ds4CompressorState& s) {
    return s.entries.capacity() + s.open_kv.capacity() + s.open_gate.capacity() + s.prev_kv.capacity() +
           s.prev_gate.capacity();
  };
  size_t n = 0;
  for (const Ds4LayerCache& l : cache.layers) n += l.window.capacity() + comp(l.attn) + comp(l.indexer);
  return static_cast<int64_t>(n * sizeof(float));
}

}  // namespace mla
