#pragma once
// KL divergence of a model's next-token distributions from a base run's, measured the way
// llama.cpp's perplexity tool measures a quantized file (`--kl-divergence-base FILE` saves the base
// run, `--kl-divergence` compares another file with it), with its base-file format so that a base
// saved by either tool is read by the other.
//
// Base file (host byte order, little-endian on every platform llama.cpp runs on; no padding):
//   char[8]  "_logits_"
//   uint32   n_ctx                       tokens per chunk
//   int32    n_vocab
//   int32    n_chunk
//   int32    tokens[n_chunk * n_ctx]     the text's tokens as tokenized (chunk starts not yet
//                                        replaced by BOS)
//   per chunk, per scored position (n_ctx/2 .. n_ctx-2: n_ctx - 1 - n_ctx/2 rows), one row of
//   kld_row_words(n_vocab) = 2 * ceil(n_vocab / 2) + 4 uint16:
//     float32 scale, float32 min_log_prob   (the row's first 4 uint16)
//     uint16  q[n_vocab]                    log p(i) = scale * q[i] + min_log_prob
//     uint16  pad                           when n_vocab is odd
// A writer maps the logits in [max - range, max] linearly onto 0..65535 (llama.cpp uses a range of
// 16, ik_llama.cpp 24; we write 24, so a scored token up to e^-24 below the top keeps its exact
// log-probability), anything below the range onto 0. Readers use only scale and min_log_prob.
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

namespace mla::cli {

// uint16 words per scored position: the two float32 and the n_vocab levels, padded to even.
int64_t kld_row_words(int64_t n_vocab);

// The logit span a row we write covers below its maximum.
inline constexpr float kKldRowRange = 24.0f;

// One row from n_vocab logits (row: kld_row_words(n_vocab) words).
void encode_kld_row(const float* logits, int64_t n_vocab, uint16_t* row);
// log p(token) of a row.
double kld_row_log_prob(const uint16_t* row, int32_t token);

struct KldBaseHeader {
  int32_t n_ctx = 0;
  int32_t n_vocab = 0;
  int32_t n_chunk = 0;
  int32_t rows_per_chunk() const { return n_ctx - 1 - n_ctx / 2; }
};

// Writes a base file row by row as the scored positions are computed; finish() checks that every
// row came and that the bytes reached the file. Errors (cannot open, short write) throw mla::Error.
class KldBaseWriter {
 public:
  // tokens: the first n_chunk * n_ctx tokens of the text.
  KldBaseWriter(const std::string& path, const KldBaseHeader& header, std::span<const int32_t> tokens);
  void write_row(const float* logits);
  void finish();

 private:
  std::string path_;
  KldBaseHeader header_;
  std::ofstream out_;
  std::vector<uint16_t> row_;
  int64_t n_rows_ = 0;
};

// Reads a base file: the constructor validates the header against the file's size and reads the
// tokens; read_chunk loads one chunk's rows. A short, corrupt or foreign file throws mla::Error
// with one line naming the file and what is wrong.
class KldBaseReader {
 public:
  explicit KldBaseReader(const std::string& path);
  const KldBaseHeader& header() const { return header_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  // Rows of chunk `chunk` (chunks are read in order, 0, 1, ...).
  void read_chunk(int32_t chunk);
  const uint16_t* row(int32_t r) const { return rows_.data() + static_cast<size_t>(r) * row_words_; }

 private:
  std::string path_;
  KldBaseHeader header_;
  std::ifstream in_;
  std::vector<int32_t> tokens_;
  std::vector<uint16_t> rows_;
  int64_t row_words_ = 0;
  int32_t next_chunk_ = 0;
};

// Per scored token, the figures llama.cpp's --kl-divergence reports, with its definitions: the
// base's log-probabilities as stored (not renormalised), KL(base || model) summed over the tokens
// whose base log-probability exceeds -16, top token = first index of the maximum.
class KldAccumulator {
 public:
  // logits: the model's n_vocab logits at a scored position; base_row: the base file's row for
  // the same position; next: the token that follows it.
  void add(const float* logits, int64_t n_vocab, const uint16_t* base_row, int32_t next);
  int64_t count() const { return static_cast<int64_t>(kld_.size()); }

  struct Sums {
    double nll = 0, nll2 = 0, nll_base = 0, nll_base2 = 0, nll_nll_base = 0;
    double kld = 0, kld2 = 0, p_diff = 0, p_diff2 = 0, p_diff4 = 0;
    int64_t n_same_top = 0;
  };
  const Sums& sums() const { return sums_; }
  const std::vector<float>& kld_values() const { return kld_; }
  const std::vector<float>& p_diff_values() const { return p_diff_; }

 private:
  Sums sums_;
  std::vector<float> kld_, p_diff_;  // per token: KL divergence, p(next) - p_base(next)
};

struct ValueError {
  double value = 0, error = 0;
};
struct Quantile {
  double fraction = 0;  // 0 = minimum, 0.5 = median, 1 = maximum
  double value = 0;
};

// What llama.cpp prints at the end of --kl-divergence (the "± x" of each line is `error`).
struct KldSummary {
  int64_t count = 0;
  ValueError ppl, ppl_base, ln_ppl_ratio, ppl_ratio, ppl_diff;
  double cor_ln_ppl = 0;  // correlation of the per-token NLLs of model and base
  ValueError kld, delta_p, rms_delta_p, same_top;
  std::vector<Quantile> kld_quantiles, delta_p_quantiles;  // empty unless asked for
};

KldSummary summarize_kld(const KldAccumulator& acc, bool with_quantiles);

// llama.cpp's percentile: linear interpolation at fraction * (n - 1) of the sorted values (float
// arithmetic, as it does); sorted must not be empty.
double kld_percentile(const std::vector<float>& sorted, float fraction);
// The middle value, or the mean of the two middle ones.
double kld_median(const std::vector<float>& sorted);

// The running line after a chunk and the final block, laid out as llama.cpp prints them.
void print_kld_chunk_header();
void print_kld_chunk_line(int32_t chunk, const KldSummary& s);
void print_kld_summary(const KldSummary& s);
// Probabilities and fractions as fractions (not percent): see README.
nlohmann::json kld_summary_json(const KldSummary& s);

}  // namespace mla::cli
