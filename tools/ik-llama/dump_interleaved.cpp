// Reference fixtures for ik_llama.cpp's row-interleaved forms (those of the legacy, K- and i-quants,
// MXFP4, Q8_K and BF16, and those of ik's own types), made by ik_llama.cpp itself: the same
// pseudo-random rows quantized to the base type and to the interleaved form (no importance matrix,
// but for the i-quants ik refuses to make without one: a uniform one, the same for both), and ik's
// dequantization of the interleaved rows. Built and run by make-fixtures.sh; the output is committed.
//
//   dump_interleaved OUT_DIR
// writes, in the MLAQFIX1 layout of dump_trellis.cpp, OUT_DIR/<form>.bin (the interleaved bytes and
// ik's dequantization of them) and, for the forms that rearrange base-type blocks,
// OUT_DIR/<form>.base.bin (the base-type bytes and ik's dequantization of those).
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "fixture_file.h"
#include "ggml.h"

// ik_llama.cpp's BF16 -> BF16_R16 repacking (iqk_quantize.h, not a public header).
extern "C" void repack_bf16_bf16_r16(const void* src, void* dst, int64_t nrows, int64_t n_per_row);

namespace {

std::vector<float> make_rows(int rows, int cols) {
  std::vector<float> x(static_cast<size_t>(rows) * cols);
  uint64_t s = 0x2545F4914F6CDD1Dull;
  auto uniform = [&s]() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((s >> 40) & 0xFFFFFF) / 16777216.0f - 0.5f;
  };
  for (int r = 0; r < rows; ++r) {
    const float scale = 0.02f * static_cast<float>(1 + r % 5);
    for (int c = 0; c < cols; ++c) {
      float v = (uniform() + uniform() + uniform() + uniform()) * scale;
      if (r % 7 == 3 && c % 89 == 11) v *= 15.0f;
      x[static_cast<size_t>(r) * cols + c] = v;
    }
  }
  return x;
}

// group: rows per interleaved group; ik's to_float of an interleaved type takes one whole group.
// with_base: also quantize to the base type (the forms whose blocks are the base type's).
// imatrix: a uniform importance matrix for both quantizations (the types ik quantizes only with one).
// base_values: the form's reference values are ik's dequantization of the base-type rows (for
// MXFP4_R8, whose dequantize_row_mxfp4_r8 at 8337e4cd3 runs its block loop over all k elements of
// the group rather than one row's, writing past the group and over its own rows).
bool dump(const std::string& dir, ggml_type base, ggml_type form, const char* name, int group, int rows, int cols,
          bool with_base = true, bool imatrix = false, bool base_values = false) {
  const std::vector<float> x = make_rows(rows, cols);
  const std::vector<float> ones(cols, 1.0f);
  std::vector<float> y_base;
  bool ok = true;
  for (ggml_type t : {base, form}) {
    if (t == base && !with_base) continue;
    const size_t row_bytes = ggml_row_size(t, cols);
    std::vector<uint8_t> q(row_bytes * rows);
    ggml_quantize_chunk(t, x.data(), q.data(), 0, rows, cols, imatrix ? ones.data() : nullptr, nullptr);
    std::vector<float> y(static_cast<size_t>(rows) * cols);
    const auto traits = ggml_internal_get_type_traits(t);
    const int step = t == form ? group : 1;
    if (t == form && base_values)
      y = y_base;
    else
      for (int r = 0; r < rows; r += step)
        traits.to_float(q.data() + r * row_bytes, y.data() + static_cast<size_t>(r) * cols,
                        static_cast<int64_t>(step) * cols);
    if (t == base) y_base = y;
    const std::string path = dir + "/" + name + (t == form ? ".bin" : ".base.bin");
    ok = ok && write_fixture(path, t, rows, cols, row_bytes, q, y);
  }
  return ok;
}

// BF16_R16: ik defines no dequantization of it; its rows are BF16 rows repacked (ik's
// repack_bf16_bf16_r16), so the form's reference values are ik's dequantization of those BF16 rows.
bool dump_bf16_r16(const std::string& dir, int rows, int cols) {
  const std::vector<float> x = make_rows(rows, cols);
  const size_t row_bytes = ggml_row_size(GGML_TYPE_BF16, cols);
  std::vector<uint8_t> base(row_bytes * rows), form(row_bytes * rows);
  ggml_quantize_chunk(GGML_TYPE_BF16, x.data(), base.data(), 0, rows, cols, nullptr, nullptr);
  repack_bf16_bf16_r16(base.data(), form.data(), rows, cols);
  std::vector<float> y(static_cast<size_t>(rows) * cols);
  ggml_internal_get_type_traits(GGML_TYPE_BF16).to_float(base.data(), y.data(), static_cast<int64_t>(rows) * cols);
  return write_fixture(dir + "/BF16_R16.base.bin", GGML_TYPE_BF16, rows, cols, row_bytes, base, y) &&
         write_fixture(dir + "/BF16_R16.bin", GGML_TYPE_BF16_R16, rows, cols, row_bytes, form, y);
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
  bool ok = dump(dir, GGML_TYPE_Q4_0, GGML_TYPE_Q4_0_R8, "Q4_0_R8", 8, 16, 512);
  ok = ok && dump(dir, GGML_TYPE_Q8_0, GGML_TYPE_Q8_0_R8, "Q8_0_R8", 8, 16, 512);
  ok = ok && dump(dir, GGML_TYPE_Q4_K, GGML_TYPE_Q4_K_R4, "Q4_K_R4", 4, 8, 512);
  ok = ok && dump(dir, GGML_TYPE_Q6_K, GGML_TYPE_Q6_K_R4, "Q6_K_R4", 4, 8, 512);
  ok = ok && dump(dir, GGML_TYPE_IQ4_XS, GGML_TYPE_IQ4_XS_R8, "IQ4_XS_R8", 8, 16, 512);
  // IQ1_S_R4 is its own quantizer (per-row scales, 32-element blocks): no base-type twin.
  ok = ok && dump(dir, GGML_TYPE_IQ1_S, GGML_TYPE_IQ1_S_R4, "IQ1_S_R4", 4, 8, 512, false);
  ok = ok && dump(dir, GGML_TYPE_Q6_0, GGML_TYPE_Q6_0_R4, "Q6_0_R4", 4, 8, 512);
  ok = ok && dump(dir, GGML_TYPE_IQ4_K, GGML_TYPE_IQ4_K_R4, "IQ4_K_R4", 4, 8, 512);
  ok = ok && dump(dir, GGML_TYPE_IQ5_K, GGML_TYPE_IQ5_K_R4, "IQ5_K_R4", 4, 8, 512);
  // The row-scaled forms: a group of 4 rows starts with the 4 rows' float scales.
  ok = ok && dump(dir, GGML_TYPE_IQ4_KS, GGML_TYPE_IQ4_KS_R4, "IQ4_KS_R4", 4, 8, 512);
  ok = ok && dump(dir, GGML_TYPE_IQ5_KS, GGML_TYPE_IQ5_KS_R4, "IQ5_KS_R4", 4, 8, 512);
  ok = ok && dump(dir, GGML_TYPE_Q5_K, GGML_TYPE_Q5_K_R4, "Q5_K_R4", 4, 8, 512);
  ok = ok && dump(dir, GGML_TYPE_Q2_K, GGML_TYPE_Q2_K_R4, "Q2_K_R4", 4, 8, 512);
  ok = ok && dump(dir, GGML_TYPE_Q3_K, GGML_TYPE_Q3_K_R4, "Q3_K_R4", 4, 8, 512);
  ok = ok && dump(dir, GGML_TYPE_IQ2_K, GGML_TYPE_IQ2_K_R4, "IQ2_K_R4", 4, 8, 512);
  ok = ok && dump(dir, GGML_TYPE_IQ3_K, GGML_TYPE_IQ3_K_R4, "IQ3_K_R4", 4, 8, 512);
  ok = ok && dump(dir, GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ2_XXS_R4, "IQ2_XXS_R4", 4, 8, 512, true, true);
  ok = ok && dump(dir, GGML_TYPE_IQ2_XS, GGML_TYPE_IQ2_XS_R4, "IQ2_XS_R4", 4, 8, 512, true, true);
  ok = ok && dump(dir, GGML_TYPE_IQ3_XXS, GGML_TYPE_IQ3_XXS_R4, "IQ3_XXS_R4", 4, 8, 512);
  ok = ok && dump(dir, GGML_TYPE_IQ2_S, GGML_TYPE_IQ2_S_R4, "IQ2_S_R4", 4, 8, 512);
  ok = ok && dump(dir, GGML_TYPE_IQ3_S, GGML_TYPE_IQ3_S_R4, "IQ3_S_R4", 4, 8, 512);
  ok = ok && dump(dir, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_NL_R4, "IQ4_NL_R4", 4, 8, 512);
  ok = ok && dump(dir, GGML_TYPE_Q5_0, GGML_TYPE_Q5_0_R4, "Q5_0_R4", 4, 8, 512);
  ok = ok && dump(dir, GGML_TYPE_MXFP4, GGML_TYPE_MXFP4_R8, "MXFP4_R8", 8, 16, 512, true, false, true);
  // Q8_K_R8 / Q8_K_R16 (one fp16 scale per row and 256 columns) read as Q8_0, which ik does not
  // make from the same rows: no base-type twin.
  ok = ok && dump(dir, GGML_TYPE_Q8_K, GGML_TYPE_Q8_K_R8, "Q8_K_R8", 8, 16, 256, false);
  ok = ok && dump(dir, GGML_TYPE_Q8_K, GGML_TYPE_Q8_K_R16, "Q8_K_R16", 16, 16, 256, false);
  ok = ok && dump_bf16_r16(dir, 16, 256);
  ggml_free(ctx);
  return ok ? 0 : 1;
}
