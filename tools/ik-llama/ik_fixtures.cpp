// Reference data for ik_llama.cpp's quant types, made by ik_llama.cpp's own ggml (linked from an ik
// build outside the repository; see make-fixtures.sh). For every type in kTypes it quantizes the
// same fixed pseudo-random rows with ggml_quantize_chunk (no importance matrix) and writes
//   <TYPE>.bin: "MLAIKQ1\0", u32 type id, u32 row count, per row {u32 n, u32 row bytes, f32 ik's
//               dot against the activation row (NaN where not computed)}, then every row's
//               quantized bytes, then every row's dequantization by the type's to_float;
//   inputs.bin: "MLAIKIN\0", u32 row count, per row u32 n, then the float rows;
//   activations.q8k: each input row's activation (a second fixed row) quantized by ik's Q8_K
//               from_float, written in mainline's Q8_K layout (d, 256 quants, 16 sums of 16: ik's
//               extra per-block sum dropped), the layout mla.cpp's Q8_K dots read.
//   usage: ik_fixtures OUT_DIR
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ggml.h"

namespace {

struct TypeEntry {
  ggml_type type;
  const char* name;
};

// ik_llama.cpp's non-trellis types (ids 133..157 of its ggml.h).
const TypeEntry kTypes[] = {
    {GGML_TYPE_Q6_0, "Q6_0"},     {GGML_TYPE_IQ2_K, "IQ2_K"},   {GGML_TYPE_IQ3_K, "IQ3_K"},
    {GGML_TYPE_IQ4_K, "IQ4_K"},   {GGML_TYPE_IQ5_K, "IQ5_K"},   {GGML_TYPE_IQ6_K, "IQ6_K"},
    {GGML_TYPE_IQ4_KS, "IQ4_KS"}, {GGML_TYPE_IQ2_KS, "IQ2_KS"}, {GGML_TYPE_IQ4_KSS, "IQ4_KSS"},
    {GGML_TYPE_IQ5_KS, "IQ5_KS"}, {GGML_TYPE_IQ3_KS, "IQ3_KS"}, {GGML_TYPE_IQ2_KL, "IQ2_KL"},
};

struct Row {
  std::vector<float> x;    // weights to quantize
  std::vector<float> act;  // the activation the dot pairs with
};

// Fixed rows of several shapes and distributions: normal, uniform, heavy-tailed (Student t with
// 3 degrees of freedom), a real-shaped one (512, the MLA latent width) with a few large outliers
// and a zero sub-block, and an all-zero row.
std::vector<Row> make_rows() {
  std::mt19937 rng(20261205);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  std::student_t_distribution<float> heavy(3.f);
  std::vector<Row> rows;
  auto add = [&](int n, auto&& gen) {
    Row r;
    r.x.resize(n);
    r.act.resize(n);
    for (int i = 0; i < n; ++i) r.x[i] = gen(i);
    for (int i = 0; i < n; ++i) r.act[i] = normal(rng);
    rows.push_back(std::move(r));
  };
  add(256, [&](int) { return 0.02f * normal(rng); });
  add(512, [&](int i) {
    const float v = 0.05f * normal(rng);
    if (i >= 64 && i < 96) return 0.f;
    return (i % 97 == 5) ? 12.f * v : v;
  });
  add(1024, [&](int) { return uniform(rng); });
  add(2048, [&](int) { return 0.1f * heavy(rng); });
  add(256, [&](int) { return 0.f; });
  return rows;
}

void put_u32(std::FILE* f, uint32_t v) { std::fwrite(&v, 4, 1, f); }
void put_f32(std::FILE* f, float v) { std::fwrite(&v, 4, 1, f); }

std::FILE* create(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) {
    std::fprintf(stderr, "cannot create %s\n", path.c_str());
    std::exit(1);
  }
  return f;
}

// ik's Q8_K block: f32 d, f32 sum, 256 int8, 16 int16 sums.
constexpr size_t kIkQ8KBytes = 4 + 4 + 256 + 32;

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string out = argv[1];
  // ggml_init fills ggml's fp16 tables, which the quantizers and to_float use.
  ggml_init_params params = {16 * 1024 * 1024, nullptr, false};
  ggml_context* ctx = ggml_init(params);
  const std::vector<Row> rows = make_rows();
  ggml_type_traits_t q8k = ggml_internal_get_type_traits(GGML_TYPE_Q8_K);
  if (ggml_row_size(GGML_TYPE_Q8_K, 256) != kIkQ8KBytes) {
    std::fprintf(stderr, "unexpected Q8_K block size %zu\n", ggml_row_size(GGML_TYPE_Q8_K, 256));
    return 1;
  }

  std::FILE* in = create(out + "/inputs.bin");
  std::fwrite("MLAIKIN", 8, 1, in);
  put_u32(in, static_cast<uint32_t>(rows.size()));
  for (const Row& r : rows) put_u32(in, static_cast<uint32_t>(r.x.size()));
  for (const Row& r : rows) std::fwrite(r.x.data(), 4, r.x.size(), in);
  std::fclose(in);

  // Activations in ik's Q8_K, then rewritten without the per-block sum.
  std::vector<std::vector<uint8_t>> acts;
  std::FILE* af = create(out + "/activations.q8k");
  for (const Row& r : rows) {
    const size_t nb = r.act.size() / 256;
    std::vector<uint8_t> ik(nb * kIkQ8KBytes);
    q8k.from_float(r.act.data(), ik.data(), static_cast<int64_t>(r.act.size()));
    for (size_t b = 0; b < nb; ++b) {
      const uint8_t* blk = ik.data() + b * kIkQ8KBytes;
      std::fwrite(blk, 4, 1, af);             // d
      std::fwrite(blk + 8, 1, 256 + 32, af);  // quants, sums of 16
    }
    acts.push_back(std::move(ik));
  }
  std::fclose(af);

  for (const TypeEntry& t : kTypes) {
    ggml_type_traits_t tr = ggml_internal_get_type_traits(t.type);
    std::vector<std::vector<uint8_t>> quants;
    std::vector<std::vector<float>> deq;
    std::vector<float> dots;
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      const int64_t n = static_cast<int64_t>(r.x.size());
      std::vector<uint8_t> q(ggml_row_size(t.type, n));
      const size_t written = ggml_quantize_chunk(t.type, r.x.data(), q.data(), 0, 1, n, nullptr, nullptr);
      if (written != q.size()) {
        std::fprintf(stderr, "%s: quantize wrote %zu of %zu bytes\n", t.name, written, q.size());
        return 1;
      }
      std::vector<float> y(n);
      tr.to_float(q.data(), y.data(), n);
      float dot = NAN;
      if (tr.vec_dot_type == GGML_TYPE_Q8_K && tr.vec_dot)
        tr.vec_dot(static_cast<int>(n), &dot, 0, q.data(), 0, acts[i].data(), 0, 1);
      quants.push_back(std::move(q));
      deq.push_back(std::move(y));
      dots.push_back(dot);
    }
    std::FILE* f = create(out + "/" + t.name + ".bin");
    std::fwrite("MLAIKQ1", 8, 1, f);
    put_u32(f, static_cast<uint32_t>(t.type));
    put_u32(f, static_cast<uint32_t>(rows.size()));
    for (size_t i = 0; i < rows.size(); ++i) {
      put_u32(f, static_cast<uint32_t>(rows[i].x.size()));
      put_u32(f, static_cast<uint32_t>(quants[i].size()));
      put_f32(f, dots[i]);
    }
    for (const auto& q : quants) std::fwrite(q.data(), 1, q.size(), f);
    for (const auto& y : deq) std::fwrite(y.data(), 4, y.size(), f);
    std::fclose(f);
    std::printf("%-8s id %3d: %zu rows\n", t.name, static_cast<int>(t.type), rows.size());
  }
  ggml_free(ctx);
  return 0;
}
