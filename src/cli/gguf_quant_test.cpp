// Test hooks for the tensor formats:
//   mla gguf quantize-test-file OUT.gguf [--types f16,q4_k,...] [--seed N] [--rows R] [--cols C]
//     writes, per type, a random F32 tensor "<type>.src" and its quantization "<type>.q" made by
//     mla.cpp's quantize_row, so other readers (gguf-py) can check our bytes.
//   mla gguf quant-roundtrip IN.f32 --type q4_k --cols C -o OUT.f32
//     quantizes raw float32 rows and writes them dequantized (quantizer accuracy studies).
#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "gguf/gguf.h"
#include "quant/quant.h"
#include "util/error.h"

namespace mla::cli {
namespace {

static_assert(std::endian::native == std::endian::little, "raw float32 files are little-endian");

std::vector<GgmlType> parse_types(const std::string& list) {
  std::vector<GgmlType> out;
  std::stringstream ss(list);
  std::string name;
  while (std::getline(ss, name, ',')) {
    if (name.empty()) continue;
    auto t = ggml_type_from_name(name);
    if (!t) fail("unknown tensor type '{}'", name);
    if (!can_quantize(*t)) fail("tensor type {} cannot be quantized by mla.cpp", ggml_type_name(*t));
    out.push_back(*t);
  }
  if (out.empty()) fail("--types is empty");
  return out;
}

// Rows of normal(0,1) data with a per-row magnitude between 1e-3 and 1e2 and a few heavy-tailed
// outliers, so scales of every size and clamping both occur.
std::vector<float> test_data(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::student_t_distribution<float> heavy(3.0f);
  std::uniform_real_distribution<float> log_mag(-3.0f, 2.0f);
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float mag = std::pow(10.0f, log_mag(rng));
    for (int64_t c = 0; c < cols; ++c) x[r * cols + c] = mag * (c % 37 == 5 ? 8.0f * heavy(rng) : normal(rng));
  }
  return x;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

std::vector<float> read_f32(const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> fp(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!fp) fail("cannot open '{}'", path);
  std::vector<float> out;
  float buf[4096];
  size_t got;
  while ((got = std::fread(buf, sizeof(float), 4096, fp.get())) > 0) out.insert(out.end(), buf, buf + got);
  return out;
}

void write_f32(const std::string& path, const std::vector<float>& x) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> fp(std::fopen(path.c_str(), "wb"), std::fclose);
  if (!fp || std::fwrite(x.data(), sizeof(float), x.size(), fp.get()) != x.size() || std::fflush(fp.get()) != 0)
    fail("write to '{}' failed", path);
}

}  // namespace

void register_gguf_quant_test(CLI::App& gguf) {
  auto* file = gguf.add_subcommand("quantize-test-file", "Write random F32 tensors and their quantizations by mla.cpp");
  static std::string out, types = "f32,f16,bf16,q8_0,q4_0,q4_k,q5_k,q6_k,q8_k";
  static uint32_t seed = 1;
  static int64_t rows = 4, cols = 512;
  file->add_option("output", out, "GGUF file to write")->required();
  file->add_option("--types", types, "Comma-separated tensor types")->capture_default_str();
  file->add_option("--seed", seed, "Random seed")->capture_default_str();
  file->add_option("--rows", rows, "Rows per tensor")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  file->add_option("--cols", cols, "Row length (a multiple of 256)")
      ->capture_default_str()
      ->check(CLI::Range(256, 1 << 24));
  file->callback([] {
    if (cols % 256 != 0) fail("--cols {} is not a multiple of 256", cols);
    GgufWriter w;
    w.set("general.architecture", GgufValue::str("quant-test"));
    w.set("quant_test.seed", GgufValue::u32(seed));
    std::mt19937 rng(seed);
    for (GgmlType t : parse_types(types)) {
      const std::string name = lower(ggml_type_name(t));
      const auto x = test_data(rows, cols, rng);
      std::vector<uint8_t> q(static_cast<size_t>(ggml_row_bytes(t, cols) * rows));
      for (int64_t r = 0; r < rows; ++r)
        quantize_row(t, x.data() + r * cols, q.data() + r * ggml_row_bytes(t, cols), cols);
      w.add_tensor(name + ".src", GgmlType::F32, {cols, rows}, x.data(), x.size() * sizeof(float));
      w.add_tensor(name + ".q", t, {cols, rows}, std::move(q));
    }
    w.write(out);
  });

  auto* rt = gguf.add_subcommand("quant-roundtrip", "Quantize raw float32 rows and write them dequantized");
  static std::string in, rt_out, type_name;
  static int64_t rt_cols = 4096;
  rt->add_option("input", in, "Raw little-endian float32 file")->required();
  rt->add_option("--type", type_name, "Tensor type, e.g. q4_k")->required();
  rt->add_option("--cols", rt_cols, "Row length")->capture_default_str()->check(CLI::PositiveNumber);
  rt->add_option("-o,--output", rt_out, "Output raw float32 file")->required();
  rt->callback([] {
    const GgmlType t = parse_types(type_name).front();
    const auto x = read_f32(in);
    if (x.empty() || x.size() % static_cast<size_t>(rt_cols) != 0)
      fail("'{}' holds {} floats, not a whole number of rows of {}", in, x.size(), rt_cols);
    std::vector<uint8_t> q(static_cast<size_t>(ggml_row_bytes(t, rt_cols)));
    std::vector<float> y(x.size());
    for (size_t r = 0; r < x.size() / rt_cols; ++r) {
      quantize_row(t, x.data() + r * rt_cols, q.data(), rt_cols);
      dequantize_row(t, q.data(), y.data() + r * rt_cols, rt_cols);
    }
    write_f32(rt_out, y);
  });
}

}  // namespace mla::cli
