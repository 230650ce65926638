// ik_llama.cpp's non-trellis quants against ik_llama.cpp itself: tests/fixtures/quant/ik/ holds
// rows quantized by ik's ggml_quantize_chunk (no importance matrix), ik's to_float of them and
// ik's dot against a Q8_K activation (tools/ik-llama/make-fixtures.sh). Checked here, on every
// kernel family this binary is built for:
//  - row sizes equal ik's (row headers included);
//  - the reference and the dispatched dequantization equal ik's floats bit for bit;
//  - the reference dot equals the f64 dot of ik's dequantized rows within 1e-6 of sum|w*a| (IQ6_K
//    within 2e-3: its dots use ik's level table while its dequantization evaluates a cubic, as in
//    ik; measured up to 7.3e-4 here) and the dispatched dot the reference within 2e-5 of sum|w*a|
//    (dot_test.cpp's SIMD tolerance; the AVX2 kernels here are in fact bit-identical);
//  - ik's own dot lies within 1e-2 of sum|w*a| of ours: it is no exact reference, since ik's SIMD
//    kernels lose precision on rows of large levels and activations (measured up to 4.8e-3 of
//    sum|w*a| on these rows, where ours is within 3e-9 of the f64 dot);
//  - the quantizers mla.cpp offers for these types write ik's bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "quant/quant.h"
#include "quant_test_util.h"

namespace mla {
namespace {

const std::string kDir = std::string(MLA_TEST_DIR) + "/fixtures/quant/ik/";

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

template <typename T>
T take(const std::vector<uint8_t>& b, size_t& at) {
  if (at + sizeof(T) > b.size()) throw std::runtime_error("fixture truncated");
  T v;
  std::memcpy(&v, b.data() + at, sizeof(T));
  at += sizeof(T);
  return v;
}

struct IkRow {
  int64_t n = 0;
  std::vector<uint8_t> quant;  // ik's quantized row
  std::vector<float> dequant;  // ik's to_float of it
  float ik_dot = NAN;          // ik's dot with the row's activation, NaN where not made
  std::vector<float> input;    // the floats ik quantized
  std::vector<uint8_t> act;    // the activation, Q8_K
};

struct IkFixture {
  uint32_t type_id = 0;
  std::vector<IkRow> rows;
};

IkFixture load(const char* name) {
  const auto in = read_file(kDir + "inputs.bin");
  size_t at = 8;
  if (std::memcmp(in.data(), "MLAIKIN", 8) != 0) throw std::runtime_error("inputs.bin: bad magic");
  const auto n_in = take<uint32_t>(in, at);
  std::vector<int64_t> lens;
  for (uint32_t i = 0; i < n_in; ++i) lens.push_back(take<uint32_t>(in, at));
  const auto acts = read_file(kDir + "activations.q8k");
  const auto b = read_file(kDir + name + ".bin");
  if (b.size() < 8 || std::memcmp(b.data(), "MLAIKQ1", 8) != 0)
    throw std::runtime_error(std::string(name) + ": bad magic");
  size_t p = 8;
  IkFixture f;
  f.type_id = take<uint32_t>(b, p);
  const auto n_rows = take<uint32_t>(b, p);
  if (n_rows != n_in) throw std::runtime_error("row counts differ");
  f.rows.resize(n_rows);
  std::vector<uint32_t> bytes(n_rows);
  for (uint32_t i = 0; i < n_rows; ++i) {
    f.rows[i].n = take<uint32_t>(b, p);
    bytes[i] = take<uint32_t>(b, p);
    f.rows[i].ik_dot = take<float>(b, p);
    if (f.rows[i].n != lens[i]) throw std::runtime_error("row lengths differ");
  }
  size_t act_at = 0;
  for (uint32_t i = 0; i < n_rows; ++i) {
    IkRow& r = f.rows[i];
    r.quant.assign(b.begin() + static_cast<std::ptrdiff_t>(p), b.begin() + static_cast<std::ptrdiff_t>(p + bytes[i]));
    p += bytes[i];
    r.input.resize(r.n);
    std::memcpy(r.input.data(), in.data() + at, 4 * r.n);
    at += 4 * r.n;
    const size_t act_bytes = static_cast<size_t>(r.n / 256 * 292);
    r.act.assign(acts.begin() + static_cast<std::ptrdiff_t>(act_at),
                 acts.begin() + static_cast<std::ptrdiff_t>(act_at + act_bytes));
    act_at += act_bytes;
  }
  for (IkRow& r : f.rows) {
    r.dequant.resize(r.n);
    if (p + 4 * r.n > b.size()) throw std::runtime_error("fixture truncated");
    std::memcpy(r.dequant.data(), b.data() + p, 4 * r.n);
    p += 4 * r.n;
  }
  return f;
}

struct Case {
  GgmlType type;
  const char* name;
};
const Case kCases[] = {
    {GgmlType::Q6_0, "Q6_0"},     {GgmlType::IQ2_K, "IQ2_K"},   {GgmlType::IQ3_K, "IQ3_K"},
    {GgmlType::IQ4_K, "IQ4_K"},   {GgmlType::IQ5_K, "IQ5_K"},   {GgmlType::IQ6_K, "IQ6_K"},
    {GgmlType::IQ4_KS, "IQ4_KS"}, {GgmlType::IQ2_KS, "IQ2_KS"}, {GgmlType::IQ4_KSS, "IQ4_KSS"},
    {GgmlType::IQ5_KS, "IQ5_KS"}, {GgmlType::IQ3_KS, "IQ3_KS"}, {GgmlType::IQ2_KL, "IQ2_KL"},
};

class IkQuant : public ::testing::TestWithParam<Case> {};

TEST_P(IkQuant, TypeIdNameAndRowSizesAreIks) {
  const Case c = GetParam();
  const IkFixture f = load(c.name);
  EXPECT_EQ(f.type_id, static_cast<uint32_t>(c.type));
  EXPECT_EQ(ggml_type_name(c.type), c.name);
  for (const IkRow& r : f.rows) EXPECT_EQ(ggml_row_bytes(c.type, r.n), static_cast<int64_t>(r.quant.size())) << r.n;
}

TEST_P(IkQuant, DequantizationIsBitIdenticalToIks) {
  const Case c = GetParam();
  const IkFixture f = load(c.name);
  for (size_t i = 0; i < f.rows.size(); ++i) {
    const IkRow& r = f.rows[i];
    std::vector<float> ref(r.n), best(r.n);
    dequantize_row_ref(c.type, r.quant.data(), ref.data(), r.n);
    dequantize_row(c.type, r.quant.data(), best.data(), r.n);
    for (int64_t e = 0; e < r.n; ++e) {
      ASSERT_EQ(testing::bits_of(ref[e]), testing::bits_of(r.dequant[e]))
          << c.name << " row " << i << " element " << e << ": " << ref[e] << " vs ik " << r.dequant[e];
      ASSERT_EQ(testing::bits_of(best[e]), testing::bits_of(r.dequant[e]))
          << c.name << " row " << i << " element " << e;
    }
  }
}

TEST_P(IkQuant, DotsAgreeWithDequantizedRowsAndIks) {
  const Case c = GetParam();
  const IkFixture f = load(c.name);
  const GgmlType at = vec_dot_type(c.type);
  for (size_t i = 0; i < f.rows.size(); ++i) {
    const IkRow& r = f.rows[i];
    // Q6_0 pairs with Q8_0, which ik's fixtures do not carry: its activation is ours.
    const std::vector<uint8_t> act =
        at == GgmlType::Q8_K ? r.act : testing::quantized(at, testing::dequantized(GgmlType::Q8_K, r.act.data(), r.n));
    const auto a = testing::dequantized(at, act.data(), r.n);
    double exact = 0, magnitude = 0;
    for (int64_t e = 0; e < r.n; ++e) {
      exact += static_cast<double>(r.dequant[e]) * a[e];
      magnitude += std::fabs(static_cast<double>(r.dequant[e]) * a[e]);
    }
    const float ref = vec_dot_ref(c.type, r.n, r.quant.data(), act.data());
    const float best = vec_dot(c.type, r.n, r.quant.data(), act.data());
    const std::string label = std::string(c.name) + " row " + std::to_string(i);
    const double tol = c.type == GgmlType::IQ6_K ? 2e-3 : 1e-6;
    EXPECT_LE(std::fabs(ref - exact), tol * magnitude + 1e-30) << label << " " << ref << " vs " << exact;
    if (!std::isnan(r.ik_dot))
      EXPECT_LE(std::fabs(ref - r.ik_dot), 1e-2 * magnitude + 1e-30) << label << " " << ref << " vs ik " << r.ik_dot;
    else
      EXPECT_TRUE(at != GgmlType::Q8_K) << label << ": the fixture lacks ik's dot";
    EXPECT_LE(std::fabs(best - ref), 2e-5 * magnitude + 1e-30) << label << " " << best << " vs ref " << ref;
  }
}

INSTANTIATE_TEST_SUITE_P(Ik, IkQuant, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// The types `mla gguf quantize` writes: byte for byte what ik's quantizer writes.
class IkQuantizer : public ::testing::TestWithParam<Case> {};

TEST_P(IkQuantizer, WritesIksBytes) {
  const Case c = GetParam();
  ASSERT_TRUE(can_quantize(c.type)) << c.name;
  const IkFixture f = load(c.name);
  for (size_t i = 0; i < f.rows.size(); ++i) {
    const IkRow& r = f.rows[i];
    const auto got = testing::quantized(c.type, r.input);
    ASSERT_EQ(got.size(), r.quant.size());
    size_t n_diff = 0, first = got.size();
    for (size_t k = 0; k < got.size(); ++k)
      if (got[k] != r.quant[k]) {
        ++n_diff;
        first = std::min(first, k);
      }
    EXPECT_EQ(n_diff, 0u) << c.name << " row " << i << " (n=" << r.n << "): " << n_diff << " bytes differ, first at "
                          << first;
  }
}

INSTANTIATE_TEST_SUITE_P(Ik, IkQuantizer,
                         ::testing::Values(Case{GgmlType::Q6_0, "Q6_0"}, Case{GgmlType::IQ4_KS, "IQ4_KS"},
                                           Case{GgmlType::IQ4_K, "IQ4_K"}, Case{GgmlType::IQ5_KS, "IQ5_KS"}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace mla
