// Dequantization against the formats' own implementations, from fixtures made outside mla.cpp:
//  - ik_llama.cpp's trellis types (IQ1_KT..IQ4_KT): rows quantized and dequantized by
//    ik_llama.cpp itself (tools/ik-llama/dump_trellis.cpp);
//  - NVFP4: rows dequantized by gguf-py 0.19.0 (tools/quant/make_nvfp4_fixture.py), every UE4M3
//    scale byte included;
//  - ik_llama.cpp's row-interleaved forms (every one mla.cpp converts: gguf/interleaved.cpp):
//    rows ik quantized to the form (and, for those that rearrange base blocks, to the base type);
//    a GGUF holding the form must load as the base type's bytes and dequantize to ik's own
//    dequantization of the form (tools/ik-llama/dump_interleaved.cpp; for BF16_R16, which ik
//    does not dequantize, and MXFP4_R8, whose ik dequantization overruns its rows, ik's
//    dequantization of the base rows it repacked); a truncated tensor, a partial group of rows
//    or a row length off the block is refused with the tensor's name.
// Every kernel this family selects must reproduce them bit for bit, and the row dot products
// must match the dot of the reference floats with the dequantized activations.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/interleaved.h"
#include "quant/kernels.h"
#include "quant/quant.h"
#include "quant_test_util.h"
#include "util/error.h"

namespace mla {
namespace {

struct Fixture {
  GgmlType type;
  int64_t rows = 0, cols = 0, row_bytes = 0;
  std::vector<uint8_t> q;
  std::vector<float> ref;
};

// Layout: "MLAQFIX1" | u32 type | u32 rows | u32 cols | u32 row_bytes | bytes | f32 values.
Fixture load(const std::string& rel) {
  const auto path = std::filesystem::path(MLA_TEST_DIR) / "fixtures" / "quant" / rel;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "missing " << path;
  char magic[8] = {};
  uint32_t head[4] = {};
  in.read(magic, 8);
  in.read(reinterpret_cast<char*>(head), sizeof(head));
  EXPECT_EQ(std::string(magic, 8), "MLAQFIX1") << path;
  Fixture f{static_cast<GgmlType>(head[0]), head[1], head[2], head[3], {}, {}};
  f.q.resize(static_cast<size_t>(f.rows * f.row_bytes));
  f.ref.resize(static_cast<size_t>(f.rows * f.cols));
  in.read(reinterpret_cast<char*>(f.q.data()), static_cast<std::streamsize>(f.q.size()));
  in.read(reinterpret_cast<char*>(f.ref.data()), static_cast<std::streamsize>(4 * f.ref.size()));
  EXPECT_TRUE(in) << "truncated " << path;
  return f;
}

class OutsideReference : public ::testing::TestWithParam<const char*> {};

TEST_P(OutsideReference, DequantizationIsBitIdentical) {
  const Fixture f = load(GetParam());
  ASSERT_EQ(f.row_bytes, ggml_row_bytes(f.type, f.cols)) << GetParam();
  std::vector<float> ref_out(f.cols), best_out(f.cols);
  for (int64_t r = 0; r < f.rows; ++r) {
    const uint8_t* row = f.q.data() + r * f.row_bytes;
    dequantize_row_ref(f.type, row, ref_out.data(), f.cols);
    dequantize_row(f.type, row, best_out.data(), f.cols);
    for (int64_t i = 0; i < f.cols; ++i) {
      const float want = f.ref[r * f.cols + i];
      ASSERT_EQ(testing::bits_of(ref_out[i]), testing::bits_of(want))
          << GetParam() << " row " << r << " element " << i << ": " << ref_out[i] << " vs " << want;
      ASSERT_EQ(testing::bits_of(best_out[i]), testing::bits_of(want))
          << GetParam() << " (selected kernel) row " << r << " element " << i;
    }
  }
}

TEST_P(OutsideReference, DotMatchesReferenceFloats) {
  const Fixture f = load(GetParam());
  const GgmlType at = vec_dot_type(f.type);
  std::mt19937 rng(5);
  const auto a = testing::quantized(at, testing::random_floats(f.cols, rng, 1.0f));
  const auto af = testing::dequantized(at, a.data(), f.cols);
  for (int64_t r = 0; r < f.rows; ++r) {
    double exact = 0, magnitude = 0;
    for (int64_t i = 0; i < f.cols; ++i) {
      const double p = static_cast<double>(f.ref[r * f.cols + i]) * af[i];
      exact += p;
      magnitude += std::fabs(p);
    }
    const uint8_t* row = f.q.data() + r * f.row_bytes;
    EXPECT_LE(std::fabs(vec_dot_ref(f.type, f.cols, row, a.data()) - exact), 1e-6 * magnitude)
        << GetParam() << " row " << r;
    EXPECT_LE(std::fabs(vec_dot(f.type, f.cols, row, a.data()) - exact), 2e-5 * magnitude)
        << GetParam() << " row " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Quant, OutsideReference,
                         ::testing::Values("ik-trellis/IQ1_KT.bin", "ik-trellis/IQ2_KT.bin", "ik-trellis/IQ3_KT.bin",
                                           "ik-trellis/IQ4_KT.bin", "nvfp4/NVFP4.bin"),
                         [](const auto& info) {
                           std::string s = info.param;
                           return s.substr(s.find('/') + 1, s.find('.') - s.find('/') - 1);
                         });

// A GGUF v3 file with one 2-D tensor of raw type id `id` holding `data`.
std::vector<uint8_t> one_tensor_file(uint32_t id, int64_t cols, int64_t rows, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> b;
  auto put = [&b](auto x) {
    const auto* p = reinterpret_cast<const uint8_t*>(&x);
    b.insert(b.end(), p, p + sizeof(x));
  };
  put(uint32_t{0x46554747});
  put(uint32_t{3});
  put(uint64_t{1});
  put(uint64_t{0});
  put(uint64_t{1});
  b.push_back('w');
  put(uint32_t{2});
  put(static_cast<uint64_t>(cols));
  put(static_cast<uint64_t>(rows));
  put(id);
  put(uint64_t{0});
  b.resize((b.size() + 31) / 32 * 32);
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

struct InterleavedCase {
  const char* name;
  GgmlType base;
  bool same_blocks;  // the form rearranges base-type blocks (a .base.bin fixture holds ik's base bytes)
};

class IkInterleaved : public ::testing::TestWithParam<InterleavedCase> {};

TEST_P(IkInterleaved, LoadsAsItsBaseTypeBitIdentical) {
  const InterleavedCase c = GetParam();
  const Fixture form = load(std::string("ik-interleaved/") + c.name + ".bin");
  const auto bytes = one_tensor_file(static_cast<uint32_t>(form.type), form.cols, form.rows, form.q);
  const auto f = GgufFile::parse(bytes.data(), bytes.size());
  const GgufTensorInfo& t = f->require_tensor("w");
  EXPECT_EQ(t.type, c.base) << c.name;
  EXPECT_EQ(t.file_type_id, static_cast<uint32_t>(form.type)) << c.name;
  EXPECT_EQ(f->type_id_space(), "ik_llama.cpp");
  const int64_t row_bytes = ggml_row_bytes(c.base, form.cols);
  ASSERT_EQ(t.n_bytes, static_cast<uint64_t>(row_bytes * form.rows)) << c.name;
  if (c.same_blocks) {
    const Fixture base = load(std::string("ik-interleaved/") + c.name + ".base.bin");
    ASSERT_EQ(base.q.size(), t.n_bytes) << c.name;
    EXPECT_EQ(std::memcmp(t.data, base.q.data(), base.q.size()), 0) << c.name << ": not ik's base-type bytes";
  }
  std::vector<float> out(form.cols);
  bool nonzero = false;
  for (int64_t r = 0; r < form.rows; ++r) {
    dequantize_row(t.type, t.data + r * row_bytes, out.data(), form.cols);
    for (int64_t i = 0; i < form.cols; ++i) {
      // Bit for bit, but for the sign of a zero: ik dequantizes Q6_0_R4 as d * q - 32 d (+0 at
      // q = 32) where its Q6_0 computes (q - 32) * d (-0 when d < 0); the values are equal.
      const float want = form.ref[r * form.cols + i];
      const bool zeros = out[i] == 0.0f && want == 0.0f;
      ASSERT_TRUE(zeros || testing::bits_of(out[i]) == testing::bits_of(want))
          << c.name << " row " << r << " element " << i << ": " << out[i] << ", ik's dequantization of the form "
          << want;
      nonzero |= out[i] != 0.0f;
    }
  }
  EXPECT_TRUE(nonzero) << c.name << ": an all-zero fixture proves nothing";
}

std::string parse_error(const std::vector<uint8_t>& bytes) {
  try {
    GgufFile::parse(bytes.data(), bytes.size(), "crafted.gguf");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// ik's own bytes, one short; one row short of whole groups; rows half a block longer (for the
// Q8_K forms, half of their 256-element block: a whole number of Q8_0 blocks, which they read as).
TEST_P(IkInterleaved, RefusesTruncatedOrMisshapenTensors) {
  const InterleavedCase c = GetParam();
  const Fixture form = load(std::string("ik-interleaved/") + c.name + ".bin");
  const auto id = static_cast<uint32_t>(form.type);
  const IkInterleavedForm* f = ik_interleaved_form(id);
  ASSERT_NE(f, nullptr) << c.name;
  std::vector<uint8_t> short_data(form.q.begin(), form.q.end() - 1);
  std::string msg = parse_error(one_tensor_file(id, form.cols, form.rows, short_data));
  EXPECT_NE(msg.find("tensor 'w' data"), std::string::npos) << c.name << ": " << msg;
  EXPECT_NE(msg.find("runs past the end"), std::string::npos) << c.name << ": " << msg;

  const int64_t rows = form.rows - 1;
  std::vector<uint8_t> fewer(form.q.begin(), form.q.begin() + rows * form.row_bytes);
  msg = parse_error(one_tensor_file(id, form.cols, rows, fewer));
  EXPECT_NE(msg.find(fmt::format("tensor 'w' of type {} (ik_llama.cpp id {}) has {} rows, not a multiple of {}", c.name,
                                 id, rows, f->n_interleaved)),
            std::string::npos)
      << msg;

  const int64_t cols = form.cols + f->row_block_elems() / 2;
  msg = parse_error(one_tensor_file(id, cols, form.rows, form.q));
  EXPECT_NE(msg.find(fmt::format("tensor 'w' of type {} (ik_llama.cpp id {}) has row length {}", c.name, id, cols)),
            std::string::npos)
      << msg;
}

// Every form mla.cpp converts has a case here.
TEST(IkInterleavedForms, EveryConvertedFormHasAnIkFixture) {
  for (const IkInterleavedForm& f : ik_interleaved_forms()) {
    const auto path =
        std::filesystem::path(MLA_TEST_DIR) / "fixtures" / "quant" / "ik-interleaved" / (std::string(f.name) + ".bin");
    EXPECT_TRUE(std::filesystem::exists(path)) << f.name << ": no fixture made by ik_llama.cpp";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Quant, IkInterleaved,
    ::testing::Values(
        InterleavedCase{"Q4_0_R8", GgmlType::Q4_0, true}, InterleavedCase{"Q8_0_R8", GgmlType::Q8_0, true},
        InterleavedCase{"Q4_K_R4", GgmlType::Q4_K, true}, InterleavedCase{"Q6_K_R4", GgmlType::Q6_K, true},
        InterleavedCase{"IQ4_XS_R8", GgmlType::IQ4_XS, true}, InterleavedCase{"IQ1_S_R4", GgmlType::IQ1_S, false},
        InterleavedCase{"Q6_0_R4", GgmlType::Q6_0, true}, InterleavedCase{"IQ4_K_R4", GgmlType::IQ4_K, true},
        InterleavedCase{"IQ5_K_R4", GgmlType::IQ5_K, true}, InterleavedCase{"IQ4_KS_R4", GgmlType::IQ4_KS, true},
        InterleavedCase{"IQ5_KS_R4", GgmlType::IQ5_KS, true}, InterleavedCase{"Q5_K_R4", GgmlType::Q5_K, true},
        InterleavedCase{"Q2_K_R4", GgmlType::Q2_K, true}, InterleavedCase{"Q3_K_R4", GgmlType::Q3_K, true},
        InterleavedCase{"IQ2_K_R4", GgmlType::IQ2_K, true}, InterleavedCase{"IQ3_K_R4", GgmlType::IQ3_K, true},
        InterleavedCase{"IQ2_XXS_R4", GgmlType::IQ2_XXS, true}, InterleavedCase{"IQ2_XS_R4", GgmlType::IQ2_XS, true},
        InterleavedCase{"IQ3_XXS_R4", GgmlType::IQ3_XXS, true}, InterleavedCase{"IQ2_S_R4", GgmlType::IQ2_S, true},
        InterleavedCase{"IQ3_S_R4", GgmlType::IQ3_S, true}, InterleavedCase{"IQ4_NL_R4", GgmlType::IQ4_NL, true},
        InterleavedCase{"Q5_0_R4", GgmlType::Q5_0, true}, InterleavedCase{"MXFP4_R8", GgmlType::MXFP4, true},
        InterleavedCase{"BF16_R16", GgmlType::BF16, true}, InterleavedCase{"Q8_K_R8", GgmlType::Q8_0, false},
        InterleavedCase{"Q8_K_R16", GgmlType::Q8_0, false}),
    [](const auto& info) { return std::string(info.param.name); });

// The avx512 family's trellis row dots must give, bit for bit, what the AVX2 ones give (same
// integer per super-block, same float steps), on ik's rows, random rows and rows of all-zero or
// all-one bits (the largest indices and scales), against activations of several magnitudes.
TEST(OutsideReference, TrellisAvx512DotsAreBitIdenticalToAvx2) {
  if (!quant::cpu_has_avx512_vnni()) GTEST_SKIP() << "not the avx512 family";
  std::mt19937 rng(11);
  for (const char* name :
       {"ik-trellis/IQ1_KT.bin", "ik-trellis/IQ2_KT.bin", "ik-trellis/IQ3_KT.bin", "ik-trellis/IQ4_KT.bin"}) {
    const Fixture f = load(name);
    const VecDotFn wide = quant::vec_dot_kt_avx512_fn(f.type), narrow = quant::vec_dot_kt_avx2_fn(f.type);
    ASSERT_NE(wide, nullptr) << name;
    EXPECT_EQ(vec_dot_fn(f.type), wide) << name << ": the avx512 family must select its own kernel";
    std::vector<uint8_t> rows = f.q;
    for (uint8_t fill : {uint8_t{0x00}, uint8_t{0xFF}}) {
      std::vector<uint8_t> row(static_cast<size_t>(f.row_bytes), fill);
      const float d = 0.5f;
      std::memcpy(row.data(), &d, 4);
      rows.insert(rows.end(), row.begin(), row.end());
    }
    for (int k = 0; k < 4; ++k) {
      const auto row = testing::random_row(f.type, f.cols, rng, testing::ScaleCase::Random);
      rows.insert(rows.end(), row.begin(), row.end());
    }
    for (float scale : {1.0f, 1e-3f, 300.0f}) {
      const auto a = testing::quantized(GgmlType::Q8_K, testing::random_floats(f.cols, rng, scale));
      for (size_t off = 0; off < rows.size(); off += static_cast<size_t>(f.row_bytes)) {
        const float want = narrow(f.cols, rows.data() + off, a.data());
        const float got = wide(f.cols, rows.data() + off, a.data());
        ASSERT_EQ(testing::bits_of(got), testing::bits_of(want))
            << name << " row " << off / f.row_bytes << " activation scale " << scale << ": " << got << " vs " << want;
      }
    }
  }
}

TEST(OutsideReference, SimdDotsExistForTheNewTypes) {
  if (!quant_isa_available(QuantIsa::Avx2)) GTEST_SKIP() << "CPU without AVX2+FMA+F16C (scalar family)";
  for (GgmlType t : {GgmlType::NVFP4, GgmlType::IQ1_KT, GgmlType::IQ2_KT, GgmlType::IQ3_KT, GgmlType::IQ4_KT})
    EXPECT_NE(find_vec_dot(t, QuantIsa::Avx2), nullptr) << ggml_type_name(t);
  EXPECT_NE(vec_dot4_fn(GgmlType::NVFP4), nullptr);
}

}  // namespace
}  // namespace mla
