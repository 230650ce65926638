// DeepSeek-V4 attention for a chunk of one sequence (docs/DEEPSEEK-V4.md §1.3-1.5): q LoRA and one
// shared K=V head with tail RoPE; the compressors (HCA: windows of m tokens; CSA: overlapping
// windows of 2m slots), which close a window whenever its m-th token arrives, whatever the
// chunking; the lightning indexer's top-k over the CSA entries; attention over the sliding window
// plus the visible (or selected) compressed entries with a per-head sink; the output un-rotated
// and projected by groups. The cache keeps only what later tokens read (deepseek4_cache.h).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/vec.h"
#include "model/deepseek4.h"
#include "model/deepseek4_internal.h"

namespace mla {

// Pools the open window's first m rows into entry w = n_entries (with, for CSA, the previous
// window's series A): a per-channel softmax over the gates, then RMSNorm and RoPE at w * m.
void Deepseek4Model::close_window(int64_t il, const Ds4Compressor& k, int64_t dim, int64_t n_series,
                                  Ds4CompressorState& st) {
  const int64_t m = c_.compress_ratio[il], width = n_series * dim, w = st.n_entries;
  const bool has_prev = n_series == 2 && !st.prev_kv.empty();
  const int64_t off = n_series == 2 ? dim : 0;  // series B (CSA) or the only one (HCA)
  st.entries.resize(static_cast<size_t>((w + 1) * dim));
  float* e = st.entries.data() + w * dim;
  std::vector<float> g(static_cast<size_t>(2 * m)), v(g.size());
  for (int64_t j = 0; j < dim; ++j) {
    int64_t n = 0;
    if (has_prev)
      for (int64_t i = 0; i < m; ++i, ++n) g[n] = st.prev_gate[i * dim + j], v[n] = st.prev_kv[i * dim + j];
    for (int64_t i = 0; i < m; ++i, ++n)
      g[n] = st.open_gate[i * width + off + j], v[n] = st.open_kv[i * width + off + j];
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
  ++st.n_entries;
  if (n_series == 2) {  // this window's series A, for the next entry
    st.prev_kv.resize(static_cast<size_t>(m * dim));
    st.prev_gate.resize(st.prev_kv.size());
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < dim; ++j) {
        st.prev_kv[i * dim + j] = st.open_kv[i * width + j];
        st.prev_gate[i * dim + j] = st.open_gate[i * width + j];
      }
  }
  st.open_kv.erase(st.open_kv.begin(), st.open_kv.begin() + m * width);
  st.open_gate.erase(st.open_gate.begin(), st.open_gate.begin() + m * width);
  st.n_open -= m;
}

// Appends the chunk's projected rows (kv, gate: n_tok rows of width n_series * dim) to the open
// window one at a time, the gate with the position bias of the row's offset in the window, closing
// the window as its m-th row arrives: the open window never holds more than m rows (its storage is
// reserved once, so a sequence's state stays within deepseek4_state_bound whatever the chunking).
void Deepseek4Model::compress(int64_t il, const Ds4Compressor& k, int64_t dim, int64_t n_series, const float* kv,
                              const float* gate, const Chunk& ch, Ds4CompressorState& st) {
  const int64_t m = c_.compress_ratio[il], width = n_series * dim;
  st.open_kv.reserve(static_cast<size_t>(m * width));
  st.open_gate.reserve(static_cast<size_t>(m * width));
  for (int64_t t = 0; t < ch.n_tok; ++t) {
    const float* ape = k.ape.data() + ((ch.pos0 + t) % m) * width;
    st.open_kv.insert(st.open_kv.end(), kv + t * width, kv + (t + 1) * width);
    for (int64_t j = 0; j < width; ++j) st.open_gate.push_back(gate[t * width + j] + ape[j]);
    if (++st.n_open == m) close_window(il, k, dim, n_series, st);
  }
}

// selected[t * top_k + j] for j < n_selected[t]: the CSA entries query pos0 + t attends to, the
// top_k highest indexer scores among the entries w < (pos + 1) / m (all of them when fewer); q:
// the chunk's indexer queries [n_tok][nI][Di] (rotated here, in place), wts: their head weights.
// score(t, w) = Σ_h relu(q_th · k_w) · weight_th / sqrt(Di · nI): the head dots in F32 tiles
// (kernels/vec.h: each the same whatever the tile), summed over heads in order in double, so a
// score does not depend on how the chunk's (token, block of entries) items are split.
void Deepseek4Model::indexer_topk(int64_t il, float* q, const float* wts, const Chunk& ch, const Ds4CompressorState& st,
                                  std::vector<int32_t>& selected, std::vector<int32_t>& n_selected) {
  const int64_t m = c_.compress_ratio[il], nI = c_.n_indexer_head, Di = c_.indexer_head_dim, top_k = c_.indexer_top_k;
  const float* keys = st.entries.data();
  // Token t's scores at score[first[t] ..]; work items of up to kBlock entries of one token.
  constexpr int64_t kBlock = 256;
  std::vector<int64_t> first(static_cast<size_t>(ch.n_tok + 1), 0);
  std::vector<std::pair<int64_t, int64_t>> items;  // (token, first entry)
  for (int64_t t = 0; t < ch.n_tok; ++t) {
    const int64_t n_vis = std::min((ch.pos0 + t + 1) / m, st.n_entries);
    first[t + 1] = first[t] + n_vis;
    for (int64_t w0 = 0; w0 < n_vis; w0 += kBlock) items.emplace_back(t, w0);
  }
  pool_.parallel_for(ch.n_tok, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) ds4::rope_tail(c_.rope_compress, ch.pos0 + t, q + t * nI * Di, nI, Di);
  });
  std::vector<float> score(static_cast<size_t>(first[ch.n_tok]));
  const double scale = 1.0 / std::sqrt(static_cast<double>(Di)) / std::sqrt(static_cast<double>(nI));
  pool_.parallel_for(static_cast<int64_t>(items.size()), [&](int64_t i0, int64_t i1, int) {
    std::vector<float> dots(static_cast<size_t>(nI * kBlock));
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = items[i].first, w0 = items[i].second;
      const int64_t nb = std::min(kBlock, first[t + 1] - first[t] - w0);
      const float* qt = q + t * nI * Di;
      dot_block_f32(
          nI, nb, Di, [&](int64_t r) { return qt + r * Di; }, [&](int64_t s) { return keys + (w0 + s) * Di; },
          dots.data(), nb);
      const float* wt = wts + t * nI;
      for (int64_t s = 0; s < nb; ++s) {
        double acc = 0;
        for (int64_t hh = 0; hh < nI; ++hh) acc += static_cast<double>(std::max(dots[hh * nb + s], 0.0f)) * wt[hh];
        score[first[t] + w0 + s] = static_cast<float>(acc * scale);
      }
    }
  });
  selected.assign(static_cast<size_t>(ch.n_tok * top_k), -1);
  n_selected.assign(static_cast<size_t>(ch.n_tok), 0);
  pool_.parallel_for(ch.n_tok, [&](int64_t t0, int64_t t1, int) {
    std::vector<int32_t> order;
    for (int64_t t = t0; t < t1; ++t) {
      const float* sc = score.data() + first[t];
      const int64_t n_vis = first[t + 1] - first[t], keep = std::min(top_k, n_vis);
      order.resize(static_cast<size_t>(n_vis));
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + keep, order.end(),
                        [&](int32_t a, int32_t b) { return sc[a] > sc[b] || (sc[a] == sc[b] && a < b); });
      std::copy(order.begin(), order.begin() + keep, selected.begin() + t * top_k);
      n_selected[t] = static_cast<int32_t>(keep);
    }
  });
}

namespace {

// o[r * d + i] = Σ_s p[r * nk + s] · keys[s][i] for r < NH (NH = 1 or 2 heads), the sum in key
// order with each output element its own accumulator (so the same bits whatever block computes
// it), 32 columns at a time: each key's floats are loaded once for both heads.
template <int NH>
void weighted_rows(int64_t nk, int64_t d, const float* p, const float* const* keys, float* o) {
  int64_t c = 0;
  for (; c + 32 <= d; c += 32) {
    f32x8 acc[NH][4] = {};
    for (int64_t s = 0; s < nk; ++s) {
      const float* k = keys[s] + c;
      f32x8 pb[NH];
      for (int r = 0; r < NH; ++r) pb[r] = f32x8{} + p[r * nk + s];
      for (int j = 0; j < 4; ++j) {
        const f32x8 kv = load_f32x8(k + 8 * j);
        for (int r = 0; r < NH; ++r) acc[r][j] = fma_f32x8(pb[r], kv, acc[r][j]);
      }
    }
    for (int r = 0; r < NH; ++r)
      for (int j = 0; j < 4; ++j) __builtin_memcpy(o + r * d + c + 8 * j, &acc[r][j], sizeof(f32x8));
  }
  for (; c < d; ++c)
    for (int r = 0; r < NH; ++r) {
      float acc = 0;
      for (int64_t s = 0; s < nk; ++s) acc = fma_f32(p[r * nk + s], keys[s][c], acc);
      o[r * d + c] = acc;
    }
}

}  // namespace

// o[t][h] = Σ p · v over the window rows (pos - W, pos] (rows[s - rows_pos0]) and the query's
// compressed entries, with p = softmax([q·k / sqrt(d) ..., sink_h]) without the sink's share.
// Work items are (token, block of kHeads heads): the q·k dots in F32 tiles (kernels/vec.h), the
// softmax with a double sum, then Σ p · v in key order (weighted_rows), so an output is the same
// bits whatever the split, the chunking or the thread count.
void Deepseek4Model::attend(int64_t il, const float* q, const std::vector<float>& rows, int64_t rows_pos0,
                            const Chunk& ch, const Ds4CompressorState& comp, const std::vector<int32_t>& selected,
                            const std::vector<int32_t>& n_selected, float* o) {
  const Ds4LayerWeights& L = w_.layers[il];
  const int64_t H = c_.n_head, d = c_.head_dim, m = c_.compress_ratio[il], W = c_.n_window;
  const bool csa = !n_selected.empty();  // the indexer's choice; empty: every visible entry (HCA, dense CSA)
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  constexpr int64_t kHeads = 8;
  const int64_t n_hb = (H + kHeads - 1) / kHeads;
  pool_.parallel_for(ch.n_tok * n_hb, [&](int64_t i0, int64_t i1, int) {
    std::vector<const float*> keys;
    std::vector<float> logit;
    int64_t keys_of = -1;  // the token `keys` was gathered for
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i / n_hb, h0 = i % n_hb * kHeads, nh = std::min(kHeads, H - h0), pos = ch.pos0 + t;
      if (keys_of != t) {
        keys.clear();
        for (int64_t s = std::max(rows_pos0, pos - W + 1); s <= pos; ++s)
          keys.push_back(rows.data() + (s - rows_pos0) * d);
        if (csa) {
          for (int32_t j = 0; j < n_selected[t]; ++j)
            keys.push_back(comp.entries.data() + selected[t * c_.indexer_top_k + j] * d);
        } else if (m > 0) {
          for (int64_t w = 0; w < std::min((pos + 1) / m, comp.n_entries); ++w)
            keys.push_back(comp.entries.data() + w * d);
        }
        keys_of = t;
      }
      const int64_t nk = static_cast<int64_t>(keys.size());
      logit.resize(static_cast<size_t>(nh * nk));
      const float* qt = q + (t * H + h0) * d;
      dot_block_f32(
          nh, nk, d, [&](int64_t r) { return qt + r * d; }, [&](int64_t s) { return keys[s]; }, logit.data(), nk);
      for (int64_t r = 0; r < nh; ++r) {
        float* p = logit.data() + r * nk;
        const float sink = L.attn_sinks[h0 + r];
        float mx = sink;
        for (int64_t s = 0; s < nk; ++s) mx = std::max(mx, p[s] *= scale);
        double den = std::exp(static_cast<double>(sink - mx));
        for (int64_t s = 0; s < nk; ++s) den += (p[s] = std::exp(p[s] - mx));
        const float inv = static_cast<float>(1.0 / den);
        for (int64_t s = 0; s < nk; ++s) p[s] *= inv;
      }
      float* oh = o + (t * H + h0) * d;
      int64_t r = 0;
      for (; r + 2 <= nh; r += 2) weighted_rows<2>(nk, d, logit.data() + r * nk, keys.data(), oh + r * d);
      if (r < nh) weighted_rows<1>(nk, d, logit.data() + r * nk, keys.data(), oh + r * d);
    }
  });
}

// One layer's attention for a batch of sequences (seqs[i]: its rows row0.. of h and out, its
// positions, its cache): every projection runs once over all the rows; the compressors' windows,
// the indexer's selection and the attention itself run per sequence over its own state. Each row's
// result is the same bits as in a batch of its sequence alone (the matmuls and the per-row steps
// do not depend on the other rows).
void Deepseek4Model::attention(int64_t il, const float* h, std::span<const Chunk> seqs,
                               std::span<Deepseek4Cache* const> caches, int64_t n_all, float* out) {
  const Ds4LayerWeights& L = w_.layers[il];
  const int64_t D = c_.n_embd, H = c_.n_head, d = c_.head_dim, R = c_.q_lora_rank;
  const float eps = static_cast<float>(c_.rms_eps);
  const RopeParams& rope = c_.rope_for(il);
  const Ds4Attn kind = c_.attn_kind(il);
  const bool csa = kind == Ds4Attn::Csa;
  const int64_t n_series = csa ? 2 : 1, width = n_series * d, nI = c_.n_indexer_head, Di = c_.indexer_head_dim;
  std::vector<int64_t> pos(static_cast<size_t>(n_all));
  for (const Chunk& ch : seqs)
    for (int64_t t = 0; t < ch.n_tok; ++t) pos[ch.row0 + t] = ch.pos0 + t;
  std::vector<float> qr(static_cast<size_t>(n_all * R)), kv(static_cast<size_t>(n_all * d)),
      q(static_cast<size_t>(n_all * H * d));
  matmul_multi({{&L.attn_q_a, qr.data(), R}, {&L.attn_kv, kv.data(), d}}, h, D, n_all, D, pool_, scratch_);
  for (int64_t t = 0; t < n_all; ++t) {
    ds4::rms(qr.data() + t * R, L.attn_q_a_norm.data(), qr.data() + t * R, R, eps);
    ds4::rms(kv.data() + t * d, L.attn_kv_norm.data(), kv.data() + t * d, d, eps);
    ds4::rope_tail(rope, pos[t], kv.data() + t * d, 1, d);
  }
  matmul(L.attn_q_b, qr.data(), R, n_all, q.data(), H * d, pool_, scratch_);
  for (int64_t t = 0; t < n_all; ++t) {
    for (int64_t hh = 0; hh < H; ++hh)
      ds4::rms(q.data() + (t * H + hh) * d, nullptr, q.data() + (t * H + hh) * d, d, eps);
    ds4::rope_tail(rope, pos[t], q.data() + t * H * d, H, d);
  }
  // The compressors' projections, and the indexer's queries and head weights, for every row.
  std::vector<float> ckv, cgate, ikv, igate, iq, iw;
  if (kind != Ds4Attn::Sliding) {
    ckv.resize(static_cast<size_t>(n_all * width)), cgate.resize(ckv.size());
    matmul_multi({{&L.compressor.kv, ckv.data(), width}, {&L.compressor.gate, cgate.data(), width}}, h, D, n_all, D,
                 pool_, scratch_);
  }
  if (csa) {
    ikv.resize(static_cast<size_t>(n_all * 2 * Di)), igate.resize(ikv.size());
    iq.resize(static_cast<size_t>(n_all * nI * Di)), iw.resize(static_cast<size_t>(n_all * nI));
    matmul_multi({{&L.idx_compressor.kv, ikv.data(), 2 * Di},
                  {&L.idx_compressor.gate, igate.data(), 2 * Di},
                  {&L.idx_proj, iw.data(), nI}},
                 h, D, n_all, D, pool_, scratch_);
    matmul(L.idx_q_b, qr.data(), R, n_all, iq.data(), nI * Di, pool_, scratch_);
  }
  std::vector<float> o(static_cast<size_t>(n_all * H * d));
  std::vector<int32_t> selected, n_selected;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const Chunk& ch = seqs[s];
    Ds4LayerCache& lc = caches[s]->layers[il];
    // rows: the cached window rows, then this chunk's K=V rows, by position from rows_pos0.
    const int64_t rows_pos0 = lc.window.empty() ? ch.pos0 : lc.first_window_pos;
    std::vector<float> rows = lc.window;
    rows.insert(rows.end(), kv.begin() + ch.row0 * d, kv.begin() + (ch.row0 + ch.n_tok) * d);
    if (kind != Ds4Attn::Sliding)
      compress(il, L.compressor, d, n_series, ckv.data() + ch.row0 * width, cgate.data() + ch.row0 * width, ch,
               lc.attn);
    if (csa) {
      compress(il, L.idx_compressor, Di, 2, ikv.data() + ch.row0 * 2 * Di, igate.data() + ch.row0 * 2 * Di, ch,
               lc.indexer);
      if (csa_dense_) {  // the indexer's keys still advance; no scoring, every entry
        selected.clear();
        n_selected.clear();
      } else {
        indexer_topk(il, iq.data() + ch.row0 * nI * Di, iw.data() + ch.row0 * nI, ch, lc.indexer, selected, n_selected);
      }
    }
    ds4::trace_attention(c_, il, ch.pos0, ch.n_tok, static_cast<int64_t>(rows.size()) / d, lc.attn.n_entries,
                         n_selected);
    attend(il, q.data() + ch.row0 * H * d, rows, rows_pos0, ch, lc.attn, selected, n_selected,
           o.data() + ch.row0 * H * d);
    // The next query reads the last W - 1 rows.
    const int64_t n_rows = static_cast<int64_t>(rows.size()) / d, keep = std::min(n_rows, c_.n_window - 1);
    lc.window.assign(rows.end() - keep * d, rows.end());
    lc.first_window_pos = ch.pos0 + ch.n_tok - keep;
  }
  for (int64_t t = 0; t < n_all; ++t) ds4::rope_tail(rope, pos[t], o.data() + t * H * d, H, d, /*inverse=*/true);
  // Grouped output projection: group g's H*d/G inputs through its own o_lora_rank rows of
  // attn_output_a, the G results side by side through attn_output_b.
  const int64_t G = c_.o_groups, OR = c_.o_lora_rank, gin = c_.o_group_in;
  std::vector<float> mid(static_cast<size_t>(n_all * G * OR));
  for (int64_t g = 0; g < G; ++g)
    matmul(L.attn_output_a.rows(g * OR, OR), o.data() + g * gin, H * d, n_all, mid.data() + g * OR, G * OR, pool_,
           scratch_);
  matmul(L.attn_output_b, mid.data(), G * OR, n_all, out, D, pool_, scratch_);
}

}  // namespace mla
