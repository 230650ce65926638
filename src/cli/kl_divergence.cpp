#include "cli/kl_divergence.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "util/error.h"

namespace mla::cli {

static_assert(std::endian::native == std::endian::little, "the base file is little-endian");

namespace {

constexpr char kMagic[8] = {'_', 'l', 'o', 'g', 'i', 't', 's', '_'};
constexpr uint64_t kHeaderBytes = 8 + 3 * 4;
// Base log-probabilities at or below this add nothing to the KL sum (llama.cpp's cut).
constexpr float kKldLogProbFloor = -16.0f;

struct RowScale {
  float scale = 0, min_log_prob = 0;
};

RowScale row_scale(const uint16_t* row) {
  RowScale s;
  std::memcpy(&s.scale, row, sizeof(float));
  std::memcpy(&s.min_log_prob, row + 2, sizeof(float));
  return s;
}

}  // namespace

int64_t kld_row_words(int64_t n_vocab) { return 2 * ((n_vocab + 1) / 2) + 4; }

void encode_kld_row(const float* logits, int64_t n_vocab, uint16_t* row) {
  float max_logit = logits[0], min_logit = logits[0];
  for (int64_t i = 1; i < n_vocab; ++i) {
    max_logit = std::max(max_logit, logits[i]);
    min_logit = std::min(min_logit, logits[i]);
  }
  min_logit = std::max(min_logit, max_logit - kKldRowRange);
  double sum = 0;
  for (int64_t i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - max_logit);
  // log p(i) = logits[i] - max - log(sum) = (logits[i] - min) + min_log_prob
  const float scale = (max_logit - min_logit) / 65535.0f;
  const float min_log_prob = static_cast<float>(static_cast<double>(min_logit) - max_logit - std::log(sum));
  std::memcpy(row, &scale, sizeof(float));
  std::memcpy(row + 2, &min_log_prob, sizeof(float));
  uint16_t* level = row + 4;
  const float inv_scale = scale > 0 ? 1.0f / scale : 0.0f;
  for (int64_t i = 0; i < n_vocab; ++i) {
    const float v = inv_scale * (logits[i] - min_logit);  // NaN and below-range logits store 0
    level[i] = v > 0 ? static_cast<uint16_t>(v < 65535.0f ? std::lrintf(v) : 65535) : 0;
  }
  std::fill(level + n_vocab, row + kld_row_words(n_vocab), uint16_t{0});
}

double kld_row_log_prob(const uint16_t* row, int32_t token) {
  const RowScale s = row_scale(row);
  return s.scale * row[4 + token] + s.min_log_prob;
}

// ---- writer ----

KldBaseWriter::KldBaseWriter(const std::string& path, const KldBaseHeader& header, std::span<const int32_t> tokens)
    : path_(path), header_(header), out_(path, std::ios::binary | std::ios::trunc) {
  assert(tokens.size() == static_cast<size_t>(header.n_ctx) * header.n_chunk);
  if (!out_) fail("perplexity: cannot write the KL-divergence base '{}'", path);
  const uint32_t n_ctx = static_cast<uint32_t>(header.n_ctx);
  out_.write(kMagic, sizeof(kMagic));
  out_.write(reinterpret_cast<const char*>(&n_ctx), sizeof(n_ctx));
  out_.write(reinterpret_cast<const char*>(&header.n_vocab), sizeof(int32_t));
  out_.write(reinterpret_cast<const char*>(&header.n_chunk), sizeof(int32_t));
  out_.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size_bytes()));
  row_.resize(static_cast<size_t>(kld_row_words(header.n_vocab)));
}

void KldBaseWriter::write_row(const float* logits) {
  encode_kld_row(logits, header_.n_vocab, row_.data());
  out_.write(reinterpret_cast<const char*>(row_.data()), static_cast<std::streamsize>(row_.size() * sizeof(uint16_t)));
  ++n_rows_;
}

void KldBaseWriter::finish() {
  assert(n_rows_ == static_cast<int64_t>(header_.n_chunk) * header_.rows_per_chunk());
  out_.close();
  if (out_.fail()) fail("perplexity: writing the KL-divergence base '{}' failed (disk full?)", path_);
}

// ---- reader ----

KldBaseReader::KldBaseReader(const std::string& path) : path_(path), in_(path, std::ios::binary) {
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (!in_ || ec) fail("--kl-divergence-base: cannot open '{}'", path);
  if (size < kHeaderBytes)
    fail("--kl-divergence-base: '{}' is {} bytes, shorter than a base file's {}-byte header", path, size, kHeaderBytes);
  char magic[8];
  uint32_t n_ctx = 0;
  in_.read(magic, sizeof(magic));
  in_.read(reinterpret_cast<char*>(&n_ctx), sizeof(n_ctx));
  in_.read(reinterpret_cast<char*>(&header_.n_vocab), sizeof(int32_t));
  in_.read(reinterpret_cast<char*>(&header_.n_chunk), sizeof(int32_t));
  if (std::memcmp(magic, kMagic, sizeof(kMagic)) != 0)
    fail("--kl-divergence-base: '{}' is not a KL-divergence base file (it does not start with \"_logits_\")", path);
  if (n_ctx < 4 || n_ctx > static_cast<uint32_t>(std::numeric_limits<int32_t>::max()) || header_.n_vocab < 1 ||
      header_.n_chunk < 1)
    fail("--kl-divergence-base: '{}' has a corrupt header: n_ctx {}, n_vocab {}, n_chunk {}", path, n_ctx,
         header_.n_vocab, header_.n_chunk);
  header_.n_ctx = static_cast<int32_t>(n_ctx);
  row_words_ = kld_row_words(header_.n_vocab);

  // n_ctx, n_chunk < 2^31 and row_words < 2^32: every product fits in 128 bits.
  using u128 = unsigned __int128;
  const u128 n_tokens = static_cast<u128>(n_ctx) * static_cast<uint32_t>(header_.n_chunk);
  const u128 expected =
      kHeaderBytes + 4 * n_tokens + 2 * static_cast<u128>(row_words_) * header_.rows_per_chunk() * header_.n_chunk;
  if (expected != size) {
    const std::string need = expected > std::numeric_limits<uint64_t>::max()
                                 ? std::string("more than 2^64")
                                 : std::to_string(static_cast<uint64_t>(expected));
    fail("--kl-divergence-base: '{}' is {} bytes but its header (n_ctx {}, n_vocab {}, n_chunk {}) needs {}: {}", path,
         size, n_ctx, header_.n_vocab, header_.n_chunk, need,
         expected > size ? "the file is truncated" : "it has trailing bytes");
  }
  tokens_.resize(static_cast<size_t>(n_tokens));
  in_.read(reinterpret_cast<char*>(tokens_.data()), static_cast<std::streamsize>(tokens_.size() * sizeof(int32_t)));
  if (!in_) fail("--kl-divergence-base: reading the tokens of '{}' failed", path);
  for (size_t i = 0; i < tokens_.size(); ++i)
    if (tokens_[i] < 0 || tokens_[i] >= header_.n_vocab)
      fail("--kl-divergence-base: '{}': token {} at position {} is outside its vocabulary of {}", path, tokens_[i], i,
           header_.n_vocab);
}

void KldBaseReader::read_chunk(int32_t chunk) {
  assert(chunk >= 0 && chunk < header_.n_chunk);
  const int32_t n_rows = header_.rows_per_chunk();
  const uint64_t chunk_words = static_cast<uint64_t>(row_words_) * n_rows;
  const uint64_t offset = kHeaderBytes + 4 * tokens_.size() + 2 * chunk_words * chunk;
  rows_.resize(chunk_words);
  in_.seekg(static_cast<std::streamoff>(offset));
  in_.read(reinterpret_cast<char*>(rows_.data()), static_cast<std::streamsize>(chunk_words * sizeof(uint16_t)));
  if (!in_) fail("--kl-divergence-base: reading chunk {} of '{}' failed", chunk, path_);
  for (int32_t r = 0; r < n_rows; ++r) {
    const RowScale s = row_scale(row(r));
    if (!std::isfinite(s.scale) || s.scale < 0 || !std::isfinite(s.min_log_prob))
      fail("--kl-divergence-base: '{}' is corrupt: chunk {} row {} has scale {} and minimum log-probability {}", path_,
           chunk, r, s.scale, s.min_log_prob);
  }
}

// ---- statistics ----

void KldAccumulator::add(const float* logits, int64_t n_vocab, const uint16_t* base_row, int32_t next) {
  float max_logit = logits[0];
  int64_t top = 0;
  for (int64_t i = 1; i < n_vocab; ++i) {
    if (logits[i] > max_logit) {
      max_logit = logits[i];
      top = i;
    }
  }
  double sum = 0;
  for (int64_t i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - max_logit);
  const double log_z = max_logit + std::log(sum);  // log p(i) = logits[i] - log_z

  const RowScale base = row_scale(base_row);
  const uint16_t* level = base_row + 4;
  int64_t top_base = 0;
  double kld = 0;
  for (int64_t i = 0; i < n_vocab; ++i) {
    if (level[i] > level[top_base]) top_base = i;
    const float log_p_base = base.scale * level[i] + base.min_log_prob;
    if (log_p_base > kKldLogProbFloor) kld += std::exp(log_p_base) * (log_p_base - (logits[i] - log_z));
  }
  const double nll = log_z - logits[next];
  const double nll_base = -kld_row_log_prob(base_row, next);
  const double p_diff = std::exp(-nll) - std::exp(-nll_base);

  Sums& s = sums_;
  s.nll += nll;
  s.nll2 += nll * nll;
  s.nll_base += nll_base;
  s.nll_base2 += nll_base * nll_base;
  s.nll_nll_base += nll * nll_base;
  s.kld += kld;
  s.kld2 += kld * kld;
  s.p_diff += p_diff;
  s.p_diff2 += p_diff * p_diff;
  s.p_diff4 += p_diff * p_diff * p_diff * p_diff;
  s.n_same_top += top == top_base ? 1 : 0;
  kld_.push_back(static_cast<float>(kld));
  p_diff_.push_back(static_cast<float>(p_diff));
}

double kld_percentile(const std::vector<float>& sorted, float fraction) {
  if (fraction <= 0) return sorted.front();
  if (fraction >= 1) return sorted.back();
  float at = fraction * static_cast<float>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(at);
  at -= static_cast<float>(lo);
  return (1 - at) * sorted[lo] + at * sorted[std::min(lo + 1, sorted.size() - 1)];
}

double kld_median(const std::vector<float>& sorted) {
  const size_t n = sorted.size();
  return n % 2 ? sorted[n / 2] : 0.5f * (sorted[n / 2 - 1] + sorted[n / 2]);
}

namespace {

// Mean and its standard error; the error is 0 for 10 values or fewer (llama.cpp's rule).
ValueError mean_error(double sum, double sum2, int64_t n) {
  if (n < 1) return {};
  const double mean = sum / static_cast<double>(n);
  const double var = sum2 / static_cast<double>(n) - mean * mean;
  return {mean, var > 0 && n > 10 ? std::sqrt(var / static_cast<double>(n - 1)) : 0.0};
}

// Covariance of the two means (0 below 10 values).
double mean_covariance(double sum_a, double sum_b, double sum_ab, int64_t n) {
  if (n < 10) return 0;
  const double dn = static_cast<double>(n);
  return (sum_ab / dn - (sum_a / dn) * (sum_b / dn)) / (dn - 1);
}

std::vector<Quantile> quantiles(std::vector<float> values, std::initializer_list<double> fractions) {
  std::sort(values.begin(), values.end());
  std::vector<Quantile> q;
  for (const double f : fractions)
    q.push_back({f, f == 0.5 ? kld_median(values) : kld_percentile(values, static_cast<float>(f))});
  return q;
}

}  // namespace

KldSummary summarize_kld(const KldAccumulator& acc, bool with_quantiles) {
  const KldAccumulator::Sums& s = acc.sums();
  KldSummary r;
  const int64_t n = r.count = acc.count();
  const ValueError log_ppl = mean_error(s.nll, s.nll2, n);
  const ValueError log_ppl_base = mean_error(s.nll_base, s.nll_base2, n);
  const double cov = mean_covariance(s.nll, s.nll_base, s.nll_nll_base, n);
  r.ppl = {std::exp(log_ppl.value), std::exp(log_ppl.value) * log_ppl.error};
  r.ppl_base = {std::exp(log_ppl_base.value), std::exp(log_ppl_base.value) * log_ppl_base.error};
  r.cor_ln_ppl = cov / (log_ppl.error * log_ppl_base.error);
  const double ratio_var = log_ppl.error * log_ppl.error + log_ppl_base.error * log_ppl_base.error - 2 * cov;
  r.ln_ppl_ratio = {log_ppl.value - log_ppl_base.value, std::sqrt(ratio_var)};
  r.ppl_ratio = {std::exp(r.ln_ppl_ratio.value), std::exp(r.ln_ppl_ratio.value) * r.ln_ppl_ratio.error};
  const double diff_var =
      r.ppl.error * r.ppl.error + r.ppl_base.error * r.ppl_base.error - 2 * r.ppl.value * r.ppl_base.value * cov;
  r.ppl_diff = {r.ppl.value - r.ppl_base.value, std::sqrt(diff_var)};

  r.kld = mean_error(s.kld, s.kld2, n);
  r.delta_p = mean_error(s.p_diff, s.p_diff2, n);
  const ValueError mse = mean_error(s.p_diff2, s.p_diff4, n);
  r.rms_delta_p = {std::sqrt(mse.value), 0.5 / std::sqrt(mse.value) * mse.error};
  const double same = n > 0 ? static_cast<double>(s.n_same_top) / static_cast<double>(n) : 0.0;
  r.same_top = {same, n > 1 ? std::sqrt(same * (1 - same) / static_cast<double>(n - 1)) : 0.0};
  if (with_quantiles && n > 0) {
    r.kld_quantiles = quantiles(acc.kld_values(), {1, 0.999, 0.99, 0.95, 0.9, 0.5, 0.1, 0.05, 0.01, 0.001, 0});
    r.delta_p_quantiles =
        quantiles(acc.p_diff_values(), {1, 0.999, 0.99, 0.95, 0.9, 0.75, 0.5, 0.25, 0.1, 0.05, 0.01, 0.001, 0});
  }
  return r;
}

// ---- output ----

namespace {

// "Maximum", "99.9%", "Median", " 5.0%", "Minimum": the row labels of llama.cpp's listing.
std::string quantile_label(double fraction) {
  if (fraction == 1) return "Maximum";
  if (fraction == 0) return "Minimum";
  if (fraction == 0.5) return "Median";
  return fmt::format("{:4.1f}%", 100 * fraction);
}

// JSON key: "max", "p99.9", "median", "p5", "min".
std::string quantile_key(double fraction) {
  if (fraction == 1) return "max";
  if (fraction == 0) return "min";
  if (fraction == 0.5) return "median";
  return fmt::format("p{:g}", 100 * fraction);
}

nlohmann::json value_error_json(const ValueError& v) { return {{"value", v.value}, {"error", v.error}}; }

nlohmann::json distribution_json(const ValueError& mean, const std::vector<Quantile>& q) {
  nlohmann::json j = {{"mean", mean.value}, {"error", mean.error}};
  for (const Quantile& x : q) j[quantile_key(x.fraction)] = x.value;
  return j;
}

}  // namespace

void print_kld_chunk_header() {
  fmt::print("\nchunk {:>21} {:>26} {:>26} {:>20} {:>20}\n", "PPL(Q)", "ln(PPL(Q)/PPL(base))", "KL divergence",
             "RMS Δp", "Same top p");
}

void print_kld_chunk_line(int32_t chunk, const KldSummary& s) {
  fmt::print(
      "{:5} {:10.4f} ± {:8.4f} {:12.5f} ± {:11.5f} {:12.5f} ± {:11.5f} {:8.3f} ± {:7.3f} % {:8.3f} ± {:7.3f} %\n",
      chunk + 1, s.ppl.value, s.ppl.error, s.ln_ppl_ratio.value, s.ln_ppl_ratio.error, s.kld.value, s.kld.error,
      100 * s.rms_delta_p.value, 100 * s.rms_delta_p.error, 100 * s.same_top.value, 100 * s.same_top.error);
  std::fflush(stdout);
}

void print_kld_summary(const KldSummary& s) {
  fmt::print("\n====== Perplexity statistics ======\n");
  fmt::print("Mean PPL(Q)                   : {:10.6f} ± {:10.6f}\n", s.ppl.value, s.ppl.error);
  fmt::print("Mean PPL(base)                : {:10.6f} ± {:10.6f}\n", s.ppl_base.value, s.ppl_base.error);
  fmt::print("Cor(ln(PPL(Q)), ln(PPL(base))): {:6.2f}%\n", 100 * s.cor_ln_ppl);
  fmt::print("Mean ln(PPL(Q)/PPL(base))     : {:10.6f} ± {:10.6f}\n", s.ln_ppl_ratio.value, s.ln_ppl_ratio.error);
  fmt::print("Mean PPL(Q)/PPL(base)         : {:10.6f} ± {:10.6f}\n", s.ppl_ratio.value, s.ppl_ratio.error);
  fmt::print("Mean PPL(Q)-PPL(base)         : {:10.6f} ± {:10.6f}\n", s.ppl_diff.value, s.ppl_diff.error);
  fmt::print("\n====== KL divergence statistics ======\n");
  fmt::print("Mean    KLD: {:10.6f} ± {:10.6f}\n", s.kld.value, s.kld.error);
  for (const Quantile& q : s.kld_quantiles) fmt::print("{:<8}KLD: {:10.6f}\n", quantile_label(q.fraction), q.value);
  fmt::print("\n====== Token probability statistics ======\n");
  fmt::print("Mean    Δp: {:6.3f} ± {:5.3f} %\n", 100 * s.delta_p.value, 100 * s.delta_p.error);
  for (const Quantile& q : s.delta_p_quantiles)
    fmt::print("{:<8}Δp: {:6.3f}%\n", quantile_label(q.fraction), 100 * q.value);
  fmt::print("RMS Δp    : {:6.3f} ± {:5.3f} %\n", 100 * s.rms_delta_p.value, 100 * s.rms_delta_p.error);
  fmt::print("Same top p: {:6.3f} ± {:5.3f} %\n", 100 * s.same_top.value, 100 * s.same_top.error);
}

nlohmann::json kld_summary_json(const KldSummary& s) {
  return {{"scored_tokens", s.count},
          {"ppl", value_error_json(s.ppl)},
          {"ppl_base", value_error_json(s.ppl_base)},
          {"cor_ln_ppl", s.cor_ln_ppl},
          {"ln_ppl_ratio", value_error_json(s.ln_ppl_ratio)},
          {"ppl_ratio", value_error_json(s.ppl_ratio)},
          {"ppl_diff", value_error_json(s.ppl_diff)},
          {"kld", distribution_json(s.kld, s.kld_quantiles)},
          {"delta_p", distribution_json(s.delta_p, s.delta_p_quantiles)},
          {"rms_delta_p", value_error_json(s.rms_delta_p)},
          {"same_top_p", value_error_json(s.same_top)}};
}

}  // namespace mla::cli
