#include "doctor/runs.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "quant/quant.h"
#include "util/error.h"

namespace mla::doctor {
namespace {

// Keeps each trunk layer's attention output rows by position.
class AttnRecorder : public ForwardObserver {
 public:
  AttnRecorder(int64_t n_layer, int64_t width, int64_t n_pos, ForwardObserver* next)
      : width_(width), n_pos_(n_pos), next_(next), rows_(n_layer, std::vector<float>(n_pos * width, 0.0f)) {}

  void on_forward(const ForwardEvent& e) override {
    if (e.point != ForwardPoint::AttentionDone || e.mtp) return;
    const BatchMeta& b = *e.batch;
    for (int64_t t = 0; t < b.n_tokens(); ++t) {
      const int64_t pos = b.positions[t];
      if (pos < n_pos_)
        std::copy(e.attn_out + t * width_, e.attn_out + (t + 1) * width_, rows_[e.layer].data() + pos * width_);
    }
    if (next_) next_->on_forward(e);
  }
  std::vector<std::vector<float>> take() { return std::move(rows_); }

 private:
  int64_t width_, n_pos_;
  ForwardObserver* next_;
  std::vector<std::vector<float>> rows_;
};

double max_abs(const float* a, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, static_cast<double>(std::fabs(a[i])));
  return m;
}

// max |a - b| / max |a|: the model's comparison (path_rel_diff), which --verify-paths uses too.
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  return path_rel_diff(a.data(), b.data(), static_cast<int64_t>(a.size()));
}

float round_f16(float x) { return fp16_to_fp32(fp32_to_fp16(x)); }
float round_bf16(float x) { return bf16_to_fp32(fp32_to_bf16(x)); }

}  // namespace

int32_t argmax(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

std::vector<double> log_softmax(const float* logits, int64_t n) {
  double mx = logits[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, static_cast<double>(logits[i]));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(logits[i] - mx);
  const double lse = mx + std::log(sum);
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[i] = logits[i] - lse;
  return out;
}

PromptRun run_prompt(const DeepseekConfig& c, const DeepseekWeights& w, const std::vector<int32_t>& prompt,
                     const RunSpec& spec, const std::vector<int32_t>* forced, int n_steps, const DoctorOptions& opt,
                     ForwardObserver* extra) {
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  if (n_prompt < 1) fail("doctor: empty canary prompt");
  if (forced && static_cast<int64_t>(forced->size()) < n_steps) fail("doctor: fewer forced tokens than steps");
  const int64_t n_pos = n_prompt + n_steps;
  const int64_t chunk = spec.chunk > 0 ? spec.chunk : n_prompt;
  AttnRecorder rec(c.n_layer, c.n_head * c.v_head, n_pos, extra);
  ModelOptions mo;
  mo.n_threads = opt.n_threads;
  mo.max_batch_tokens = chunk;
  mo.dsa = spec.dsa;
  mo.exact_attention = opt.exact_attention;
  mo.observer = &rec;
  Deepseek2Model model(c, w, mo);
  LatentCache cache = model.make_cache(n_pos, opt.kv_dtype);
  std::vector<float> logits(static_cast<size_t>(c.n_vocab));
  PromptRun run;

  for (int64_t p0 = 0; p0 < n_prompt; p0 += chunk) {
    std::vector<int32_t> piece(prompt.begin() + p0, prompt.begin() + std::min(n_prompt, p0 + chunk));
    model.forward(single_sequence_batch(piece, static_cast<int32_t>(p0), false, spec.policy), cache, logits.data());
  }
  for (int step = 0; step < n_steps; ++step) {
    run.logits.push_back(logits);
    const int32_t next = forced ? (*forced)[step] : argmax(logits);
    run.tokens.push_back(next);
    if (step + 1 < n_steps)
      model.forward(single_sequence_batch({next}, static_cast<int32_t>(n_prompt + step), false, spec.policy), cache,
                    logits.data());
  }
  run.attn = rec.take();
  run.tokens_mha = model.path_counters().tokens_mha.load();
  run.tokens_mqa = model.path_counters().tokens_mqa.load();
  return run;
}

void accumulate_comparison(const PromptRun& ref, const PromptRun& other, PathComparison& out) {
  out.tokens_mha += other.tokens_mha;
  out.tokens_mqa += other.tokens_mqa;
  if (out.layer_rel.size() < ref.attn.size()) out.layer_rel.resize(ref.attn.size(), 0.0);
  for (size_t l = 0; l < ref.attn.size(); ++l)
    out.layer_rel[l] = std::max(out.layer_rel[l], rel_diff(ref.attn[l], other.attn[l]));
  for (size_t i = 0; i < ref.logits.size() && i < other.logits.size(); ++i) {
    const std::vector<float>& lo = other.logits[i];
    out.logits_rel = std::max(out.logits_rel, rel_diff(ref.logits[i], lo));
    // The reference's token must be this run's argmax too, unless the two are a near tie here.
    const int32_t want = ref.tokens[i], got = argmax(lo);
    if (got != want && lo[got] - lo[want] > 1e-3 * max_abs(lo.data(), lo.size())) out.greedy_agree = false;
  }
}

NumericsProbe::NumericsProbe(const DeepseekConfig& c, const DeepseekWeights& w) : c_(c), w_(w) {
  layers_.resize(c.n_layer);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  energy_.assign(c.n_layer, std::vector<double>(c.n_head * c.n_head, nan));
  for (int64_t il = 0; il < c.n_layer; ++il) layers_[il].layer = il;
}

void NumericsProbe::on_forward(const ForwardEvent& o) {
  if (o.point != ForwardPoint::AttentionDone || o.mtp) return;
  const int64_t H = c_.n_head, R = c_.kv_lora_rank, N = c_.qk_nope, P = c_.qk_rope, D = c_.latent_dim;
  const int64_t q_stride = H * c_.qk_head, out_w = H * c_.v_head;
  const LayerWeights& L = w_.layers[o.layer];
  if (!L.w_uk) fail("doctor: the numerics probe needs W_UK in the absorbed form");
  uk_.resize(R * N);
  LayerNumerics& n = layers_[o.layer];
  const BatchMeta& b = *o.batch;
  const double inf = std::numeric_limits<double>::infinity();
  q_lat_.resize(R);
  row_.resize(D);
  for (int64_t t = 0; t < b.n_tokens(); ++t) {
    const float* lat = o.latent + t * D;
    n.max_latent = std::max(n.max_latent, max_abs(lat, D));
    n.max_attn_out = std::max(n.max_attn_out, max_abs(o.attn_out + t * out_w, out_w));
    // The cache round trip of this step's row.
    const int32_t slot = b.slot_mapping[t];
    o.cache->read_rows(static_cast<int>(o.layer), {&slot, 1}, row_.data());
    double err = 0;
    for (int64_t i = 0; i < D; ++i) err = std::max(err, static_cast<double>(std::fabs(lat[i] - row_[i])));
    const double ref = max_abs(lat, D);
    n.cache_rel_err = std::max(n.cache_rel_err, ref > 0 ? err / ref : err);
  }
  for (const SeqMeta& s : b.seqs) {
    ctx_.resize(static_cast<size_t>(s.context_len * D));
    o.cache->read_rows(static_cast<int>(o.layer),
                       {b.context_slots.data() + s.slots_start, static_cast<size_t>(s.context_len)}, ctx_.data());
    for (int32_t k = 0; k < s.query_len; ++k) {
      const int64_t t = s.query_start + k;
      const int64_t last = s.context_len - s.query_len + k;  // causal: rows 0..last
      for (int64_t h = 0; h < H; ++h) {
        const float* q = o.q + t * q_stride + h * c_.qk_head;          // [q_nope | q_pe]
        const float* uk = mla_proj_head(L.w_uk, h, R, N, uk_.data());  // [R][N]
        for (int64_t r = 0; r < R; ++r) {
          double acc = 0;
          for (int64_t d = 0; d < N; ++d) acc += static_cast<double>(uk[r * N + d]) * q[d];
          q_lat_[r] = static_cast<float>(acc);
        }
        n.max_q_absorbed = std::max(n.max_q_absorbed, max_abs(q_lat_.data(), R));
        if (k >= s.query_len - kPairQueries) pair_energies(o.layer, h, q, last);
        // The absorbed score against each visible row, in double and with F16 / BF16 inputs
        // (products summed in F32, as a kernel taking half-precision inputs would).
        for (int64_t j = 0; j <= last; ++j) {
          const float* row = ctx_.data() + j * D;
          double exact = 0;
          float s16 = 0, sbf = 0;
          for (int64_t r = 0; r < R; ++r) {
            exact += static_cast<double>(q_lat_[r]) * row[r];
            s16 += round_f16(q_lat_[r]) * round_f16(row[r]);
            sbf += round_bf16(q_lat_[r]) * round_bf16(row[r]);
          }
          for (int64_t d = 0; d < P; ++d) {
            exact += static_cast<double>(q[N + d]) * row[R + d];
            s16 += round_f16(q[N + d]) * round_f16(row[R + d]);
            sbf += round_bf16(q[N + d]) * round_bf16(row[R + d]);
          }
          const double e16 = std::isfinite(s16) ? std::fabs(exact - s16) * c_.kq_scale : inf;
          const double ebf = std::isfinite(sbf) ? std::fabs(exact - sbf) * c_.kq_scale : inf;
          n.score_err_f16 = std::max(n.score_err_f16, e16);
          n.score_err_bf16 = std::max(n.score_err_bf16, ebf);
        }
      }
    }
  }
}

void NumericsProbe::pair_energies(int64_t il, int64_t h, const float* q_nope, int64_t last) {
  const int64_t H = c_.n_head, R = c_.kv_lora_rank, N = c_.qk_nope, D = c_.latent_dim;
  const LayerWeights& L = w_.layers[il];
  std::vector<int64_t> gs;
  if (H <= kMaxFullHeads) {
    for (int64_t g = 0; g < H; ++g) gs.push_back(g);
  } else {
    gs = {h, H - 1 - h, (h + 1) % H, (h + H - 1) % H};
  }
  pair_q_.resize(R);
  for (int64_t g : gs) {
    const float* uk = mla_proj_head(L.w_uk, g, R, N, uk_.data());
    for (int64_t r = 0; r < R; ++r) {
      double acc = 0;
      for (int64_t d = 0; d < N; ++d) acc += static_cast<double>(uk[r * N + d]) * q_nope[d];
      pair_q_[r] = acc;
    }
    double e = 0;
    for (int64_t j = 0; j <= last; ++j) {
      const float* row = ctx_.data() + j * D;
      double s = 0;
      for (int64_t r = 0; r < R; ++r) s += pair_q_[r] * row[r];
      e += s * s;
    }
    double& cell = energy_[il][h * H + g];
    cell = std::isnan(cell) ? e : cell + e;
  }
}

HeadPairing head_pairing(const NumericsProbe& p, int64_t n_layer, int64_t n_head) {
  const int64_t H = n_head;
  HeadPairing out;
  out.ratio = 0;
  if (H < 2) return out;
  // Candidate permutations: g = perm(h).
  std::vector<std::pair<std::string, std::vector<int64_t>>> perms;
  std::vector<int64_t> rev(H);
  for (int64_t h = 0; h < H; ++h) rev[h] = H - 1 - h;
  perms.push_back({"reversed", rev});
  for (int64_t k = 1; k < H; ++k) {
    if (H > NumericsProbe::kMaxFullHeads && k != 1 && k != H - 1) continue;
    std::vector<int64_t> rot(H);
    for (int64_t h = 0; h < H; ++h) rot[h] = (h + k) % H;
    perms.push_back({fmt::format("rotated by {}", k), rot});
  }
  for (int64_t il = 0; il < n_layer; ++il) {
    const std::vector<double>& e = p.pair_energy(il);
    double ident = 0;
    for (int64_t h = 0; h < H; ++h) ident += e[h * H + h];
    if (std::isnan(ident) || ident <= 0) continue;
    for (const auto& [name, perm] : perms) {
      double tot = 0;
      for (int64_t h = 0; h < H; ++h) tot += e[h * H + perm[h]];
      if (!std::isnan(tot) && tot / ident > out.ratio) out = {name, tot / ident, il};
    }
  }
  return out;
}

}  // namespace mla::doctor
