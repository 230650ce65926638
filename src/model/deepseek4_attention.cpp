// DeepSeek-V4 attention over a full sequence from position 0 (docs/DEEPSEEK-V4.md §1.3-1.5):
// q LoRA and one shared K=V head with tail RoPE; the compressors (HCA: windows of m tokens; CSA:
// overlapping windows of 2m slots); the lightning indexer's top-k over the CSA entries; attention
// over the sliding window plus the visible (or selected) compressed entries with a per-head sink;
// the output un-rotated and projected by groups.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "model/deepseek4.h"
#include "model/deepseek4_internal.h"

namespace mla {

// entries[w][dim]: entry w pools window w's tokens (and, for CSA, window w-1's series A) with a
// per-channel softmax over the gates; then RMSNorm and RoPE at position w * m.
void Deepseek4Model::compress(int64_t il, const Ds4Compressor& k, int64_t dim, int64_t n_series, const float* h,
                              int64_t n_tok, std::vector<float>& entries) {
  const int64_t m = c_.compress_ratio[il], n_comp = n_tok / m, width = n_series * dim, D = c_.n_embd;
  entries.assign(static_cast<size_t>(n_comp * dim), 0.0f);
  if (n_comp == 0) return;
  std::vector<float> kv(static_cast<size_t>(n_comp * m * width)), gate(kv.size());
  matmul_multi({{&k.kv, kv.data(), width}, {&k.gate, gate.data(), width}}, h, D, n_comp * m, D, pool_, scratch_);
  for (int64_t t = 0; t < n_comp * m; ++t)
    for (int64_t j = 0; j < width; ++j) gate[t * width + j] += k.ape[(t % m) * width + j];
  std::vector<float> g(static_cast<size_t>(2 * m)), v(g.size());
  for (int64_t w = 0; w < n_comp; ++w) {
    float* e = entries.data() + w * dim;
    for (int64_t j = 0; j < dim; ++j) {
      int64_t n = 0;
      if (n_series == 2 && w > 0)  // series A of the previous window
        for (int64_t i = 0; i < m; ++i, ++n) {
          g[n] = gate[((w - 1) * m + i) * width + j];
          v[n] = kv[((w - 1) * m + i) * width + j];
        }
      const int64_t off = n_series == 2 ? dim : 0;  // series B (CSA) or the only one (HCA)
      for (int64_t i = 0; i < m; ++i, ++n) {
        g[n] = gate[(w * m + i) * width + off + j];
        v[n] = kv[(w * m + i) * width + off + j];
      }
      const float mx = *std::max_element(g.begin(), g.begin() + n);
      double num = 0, den = 0;
      for (int64_t s = 0; s < n; ++s) {
        const double p = std::exp(static_cast<double>(g[s] - mx));
        den += p;
        num += p * v[s];
      }
      e[j] = static_cast<float>(num / den);
    }
    ds4::rms(e, k.norm.data(), e, dim, static_cast<float>(c_.rms_eps));
    ds4::rope_tail(c_.rope_compress, w * m, e, 1, dim);
  }
}

// selected[t * top_k + j] for j < n_selected[t]: the CSA entries query t attends to, the top_k
// highest indexer scores among the entries w < (t + 1) / m (all of them when fewer).
void Deepseek4Model::indexer_topk(int64_t il, const float* h, const float* qr, int64_t n_tok,
                                  std::vector<int32_t>& selected, std::vector<int32_t>& n_selected) {
  const Ds4LayerWeights& L = w_.layers[il];
  const int64_t m = c_.compress_ratio[il], nI = c_.n_indexer_head, Di = c_.indexer_head_dim, top_k = c_.indexer_top_k;
  std::vector<float> keys;
  compress(il, L.idx_compressor, Di, 2, h, n_tok, keys);
  const int64_t n_comp = static_cast<int64_t>(keys.size()) / Di;
  std::vector<float> q(static_cast<size_t>(n_tok * nI * Di)), wts(static_cast<size_t>(n_tok * nI));
  matmul(L.idx_q_b, qr, c_.q_lora_rank, n_tok, q.data(), nI * Di, pool_, scratch_);
  matmul(L.idx_proj, h, c_.n_embd, n_tok, wts.data(), nI, pool_, scratch_);
  selected.assign(static_cast<size_t>(n_tok * top_k), -1);
  n_selected.assign(static_cast<size_t>(n_tok), 0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(Di)) / std::sqrt(static_cast<double>(nI));
  pool_.parallel_for(n_tok, [&](int64_t t0, int64_t t1, int) {
    std::vector<double> score;
    std::vector<int32_t> order;
    for (int64_t t = t0; t < t1; ++t) {
      float* qt = q.data() + t * nI * Di;
      ds4::rope_tail(c_.rope_compress, t, qt, nI, Di);
      const int64_t n_vis = std::min((t + 1) / m, n_comp);
      score.assign(static_cast<size_t>(n_vis), 0.0);
      for (int64_t w = 0; w < n_vis; ++w)
        for (int64_t hh = 0; hh < nI; ++hh) {
          double dot = 0;
          for (int64_t i = 0; i < Di; ++i) dot += static_cast<double>(qt[hh * Di + i]) * keys[w * Di + i];
          score[w] += std::max(dot, 0.0) * wts[t * nI + hh] * scale;
        }
      const int64_t keep = std::min(top_k, n_vis);
      order.resize(static_cast<size_t>(n_vis));
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + keep, order.end(),
                        [&](int32_t a, int32_t b) { return score[a] > score[b] || (score[a] == score[b] && a < b); });
      std::copy(order.begin(), order.begin() + keep, selected.begin() + t * top_k);
      n_selected[t] = static_cast<int32_t>(keep);
    }
  });
}

// o[t][h] = Σ p · v over the window rows (t - W, t] and the query's compressed entries, with
// p = softmax([q·k / sqrt(d) ..., sink_h]) without the sink's own share.
void Deepseek4Model::attend(int64_t il, const float* q, const float* kv, const std::vector<float>& comp,
                            const std::vector<int32_t>& selected, const std::vector<int32_t>& n_selected, int64_t n_tok,
                            float* o) {
  const Ds4LayerWeights& L = w_.layers[il];
  const int64_t H = c_.n_head, d = c_.head_dim, m = c_.compress_ratio[il], W = c_.n_window;
  const int64_t n_comp = static_cast<int64_t>(comp.size()) / d;
  const bool csa = c_.attn_kind(il) == Ds4Attn::Csa;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  pool_.parallel_for(n_tok, [&](int64_t t0, int64_t t1, int) {
    std::vector<const float*> rows;
    std::vector<double> logit;
    for (int64_t t = t0; t < t1; ++t) {
      rows.clear();
      for (int64_t s = std::max<int64_t>(0, t - W + 1); s <= t; ++s) rows.push_back(kv + s * d);
      if (csa) {
        for (int32_t j = 0; j < n_selected[t]; ++j)
          rows.push_back(comp.data() + selected[t * c_.indexer_top_k + j] * d);
      } else if (m > 0) {
        for (int64_t w = 0; w < std::min((t + 1) / m, n_comp); ++w) rows.push_back(comp.data() + w * d);
      }
      logit.resize(rows.size());
      for (int64_t hh = 0; hh < H; ++hh) {
        const float* qh = q + (t * H + hh) * d;
        double mx = L.attn_sinks[hh];
        for (size_t r = 0; r < rows.size(); ++r) {
          double dot = 0;
          for (int64_t i = 0; i < d; ++i) dot += static_cast<double>(qh[i]) * rows[r][i];
          logit[r] = dot * scale;
          mx = std::max(mx, logit[r]);
        }
        double den = std::exp(L.attn_sinks[hh] - mx);
        for (double& l : logit) den += (l = std::exp(l - mx));
        float* oh = o + (t * H + hh) * d;
        std::fill(oh, oh + d, 0.0f);
        for (size_t r = 0; r < rows.size(); ++r) {
          const float p = static_cast<float>(logit[r] / den);
          for (int64_t i = 0; i < d; ++i) oh[i] += p * rows[r][i];
        }
      }
    }
  });
}

void Deepseek4Model::attention(int64_t il, const float* h, int64_t n_tok, float* out) {
  const Ds4LayerWeights& L = w_.layers[il];
  const int64_t D = c_.n_embd, H = c_.n_head, d = c_.head_dim, R = c_.q_lora_rank;
  const float eps = static_cast<float>(c_.rms_eps);
  const RopeParams& rope = c_.rope_for(il);
  std::vector<float> qr(static_cast<size_t>(n_tok * R)), q(static_cast<size_t>(n_tok * H * d)),
      kv(static_cast<size_t>(n_tok * d));
  matmul_multi({{&L.attn_q_a, qr.data(), R}, {&L.attn_kv, kv.data(), d}}, h, D, n_tok, D, pool_, scratch_);
  for (int64_t t = 0; t < n_tok; ++t) {
    ds4::rms(qr.data() + t * R, L.attn_q_a_norm.data(), qr.data() + t * R, R, eps);
    ds4::rms(kv.data() + t * d, L.attn_kv_norm.data(), kv.data() + t * d, d, eps);
    ds4::rope_tail(rope, t, kv.data() + t * d, 1, d);
  }
  matmul(L.attn_q_b, qr.data(), R, n_tok, q.data(), H * d, pool_, scratch_);
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int64_t hh = 0; hh < H; ++hh)
      ds4::rms(q.data() + (t * H + hh) * d, nullptr, q.data() + (t * H + hh) * d, d, eps);
    ds4::rope_tail(rope, t, q.data() + t * H * d, H, d);
  }
  std::vector<float> comp;
  std::vector<int32_t> selected, n_selected;
  const Ds4Attn kind = c_.attn_kind(il);
  if (kind != Ds4Attn::Sliding) compress(il, L.compressor, d, kind == Ds4Attn::Csa ? 2 : 1, h, n_tok, comp);
  if (kind == Ds4Attn::Csa) indexer_topk(il, h, qr.data(), n_tok, selected, n_selected);
  std::vector<float> o(static_cast<size_t>(n_tok * H * d));
  attend(il, q.data(), kv.data(), comp, selected, n_selected, n_tok, o.data());
  for (int64_t t = 0; t < n_tok; ++t) ds4::rope_tail(rope, t, o.data() + t * H * d, H, d, /*inverse=*/true);
  // Grouped output projection: group g's H*d/G inputs through its own o_lora_rank rows of
  // attn_output_a, the G results side by side through attn_output_b.
  const int64_t G = c_.o_groups, OR = c_.o_lora_rank, gin = c_.o_group_in;
  std::vector<float> mid(static_cast<size_t>(n_tok * G * OR));
  for (int64_t g = 0; g < G; ++g)
    matmul(L.attn_output_a.rows(g * OR, OR), o.data() + g * gin, H * d, n_tok, mid.data() + g * OR, G * OR, pool_,
           scratch_);
  matmul(L.attn_output_b, mid.data(), G * OR, n_tok, out, D, pool_, scratch_);
}

}  // namespace mla
