// Reference fixtures for ik_llama.cpp's trellis types (IQ1_KT, IQ2_KT, IQ3_KT, IQ4_KT), made by
// ik_llama.cpp itself: fixed pseudo-random rows are quantized with its quantizer (no importance
// matrix) and dequantized with its to_float. Built against an ik_llama.cpp tree outside the
// repository by make-fixtures.sh; the output is committed so tests need no ik build.
//
//   dump_trellis OUT_DIR
// writes OUT_DIR/<type>.bin per type:
//   "MLAQFIX1" | u32 type id | u32 rows | u32 cols | u32 row_bytes |
//   rows * row_bytes bytes (the quantized rows) | rows * cols f32 (ik's dequantization)
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "fixture_file.h"
#include "ggml.h"

namespace {

// Deterministic rows: a Gaussian-like body (sum of 4 uniforms) whose scale varies per row, with a
// few large outliers in the last row, as real weight rows have.
std::vector<float> make_rows(int rows, int cols) {
  std::vector<float> x(static_cast<size_t>(rows) * cols);
  uint64_t s = 0x9E3779B97F4A7C15ull;
  auto uniform = [&s]() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((s >> 40) & 0xFFFFFF) / 16777216.0f - 0.5f;
  };
  for (int r = 0; r < rows; ++r) {
    const float scale = 0.01f * static_cast<float>(1 + 3 * r);
    for (int c = 0; c < cols; ++c) {
      float v = (uniform() + uniform() + uniform() + uniform()) * scale;
      if (r == rows - 1 && c % 97 == 5) v *= 12.0f;
      x[static_cast<size_t>(r) * cols + c] = v;
    }
  }
  return x;
}

bool dump(const std::string& dir, ggml_type type, const char* name, int rows, int cols) {
  const std::vector<float> x = make_rows(rows, cols);
  const size_t row_bytes = ggml_row_size(type, cols);
  std::vector<uint8_t> q(row_bytes * rows);
  ggml_quantize_chunk(type, x.data(), q.data(), 0, rows, cols, nullptr, nullptr);
  std::vector<float> y(static_cast<size_t>(rows) * cols);
  const auto traits = ggml_internal_get_type_traits(type);
  for (int r = 0; r < rows; ++r)
    traits.to_float(q.data() + r * row_bytes, y.data() + static_cast<size_t>(r) * cols, cols);

  const std::string path = dir + "/" + name + ".bin";
  return write_fixture(path, type, rows, cols, row_bytes, q, y);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  // ggml_init fills ggml's fp16 conversion table, which the quantizers and to_float read.
  ggml_init_params params{0, nullptr, true};
  ggml_context* ctx = ggml_init(params);
  // ik's trellis quantizers are slow: few, short rows.
  bool ok = dump(dir, GGML_TYPE_IQ1_KT, "IQ1_KT", 4, 512);
  ok = ok && dump(dir, GGML_TYPE_IQ2_KT, "IQ2_KT", 4, 512);
  ok = ok && dump(dir, GGML_TYPE_IQ3_KT, "IQ3_KT", 4, 512);
  ok = ok && dump(dir, GGML_TYPE_IQ4_KT, "IQ4_KT", 4, 512);
  ggml_free(ctx);
  return ok ? 0 : 1;
}
