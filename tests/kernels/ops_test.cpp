// Row ops (rmsnorm, softmax, swiglu) and RoPE against their scalar references, and RoPE/YaRN
// against an independent transcription of transformers' formulation (blend inverse
// frequencies, rotate_half on the de-interleaved vector).
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <random>
#include <vector>

#include "../support/random.h"
#include "kernels/ops.h"
#include "kernels/rope.h"

namespace mla {
namespace {

TEST(Ops, RmsNormMatchesReference) {
  for (int64_t n : {1, 7, 64, 513, 7168}) {
    auto x = randn(n, 1 + n, 3), w = randn(n, 2 + n);
    std::vector<float> y(n), yr(n);
    rmsnorm(x.data(), w.data(), y.data(), n, 1e-6f);
    rmsnorm_ref(x.data(), w.data(), yr.data(), n, 1e-6f);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], yr[i], 1e-5 * (1 + std::fabs(yr[i]))) << n << " " << i;
    // In place gives the same bits.
    std::vector<float> z = x;
    rmsnorm(z.data(), w.data(), z.data(), n, 1e-6f);
    EXPECT_EQ(z, y);
  }
}

TEST(Ops, RmsNormOfZeroRowIsZero) {
  std::vector<float> x(16, 0.0f), w(16, 1.0f), y(16, 5.0f);
  rmsnorm(x.data(), w.data(), y.data(), 16, 1e-6f);
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

TEST(Ops, SoftmaxMatchesReference) {
  for (int64_t n : {1, 2, 9, 100, 4097}) {
    auto x = randn(n, 10 + n, 8);
    x[0] = 80;  // large values must not overflow
    auto a = x, b = x;
    softmax(a.data(), n);
    softmax_ref(b.data(), n);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_NEAR(a[i], b[i], 1e-6 + 1e-5 * b[i]);
      sum += a[i];
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
}

TEST(Ops, SwigluMatchesReference) {
  const int64_t n = 1000;
  auto g = randn(n, 3, 6), u = randn(n, 4);
  std::vector<float> y(n), yr(n);
  swiglu(g.data(), u.data(), y.data(), n);
  swiglu_ref(g.data(), u.data(), yr.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], yr[i], 1e-6 * (1 + std::fabs(yr[i])));
  // Known values: silu(0) = 0, silu(1) = 1 / (1 + e^-1).
  float g2[2] = {0, 1}, u2[2] = {3, 2}, y2[2];
  swiglu(g2, u2, y2, 2);
  EXPECT_EQ(y2[0], 0.0f);
  EXPECT_NEAR(y2[1], 2.0 / (1 + std::exp(-1.0)), 1e-6);
}

TEST(Rope, FastMatchesReference) {
  RopeParams p;
  p.n_dims = 64;
  p.freq_base = 10000;
  for (int yarn = 0; yarn < 2; ++yarn) {
    if (yarn) {
      p.freq_scale = 1.0 / 40;
      p.ext_factor = 1;
      p.n_ctx_orig = 4096;
      p.attn_factor = 1.3;
    }
    for (int64_t pos : {0, 1, 17, 4095, 100000}) {
      auto x = randn(3 * 80, 20 + pos);
      auto xr = x;
      std::vector<float> c(32), s(32);
      rope_cos_sin(p, pos, c.data(), s.data());
      rope_apply(x.data() + 16, 3, 80, 64, c.data(), s.data());
      for (int r = 0; r < 3; ++r) rope_ref(p, pos, xr.data() + 16 + r * 80);
      for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], xr[i], 1e-5) << "yarn " << yarn << " pos " << pos;
    }
  }
}

// transformers' _compute_yarn_parameters + apply_rotary_pos_emb_interleave, transcribed
// independently (double precision): inverse frequencies are blended, not angles.
std::vector<double> transformers_rope(const std::vector<double>& x, int dim, double base, double factor, int orig_ctx,
                                      double attention_factor, int64_t pos, bool yarn) {
  std::vector<double> inv(dim / 2);
  auto corr = [&](double rot) {
    return dim * std::log(orig_ctx / (rot * 2 * std::numbers::pi)) / (2 * std::log(base));
  };
  double low = std::max(std::floor(corr(32)), 0.0), high = std::min(std::ceil(corr(1)), dim - 1.0);
  if (low == high) high += 0.001;
  for (int i = 0; i < dim / 2; ++i) {
    double pos_freq = std::pow(base, 2.0 * i / dim);
    double extrap = 1 / pos_freq, interp = 1 / (factor * pos_freq);
    double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    double extrap_factor = 1 - ramp;
    inv[i] = yarn ? interp * (1 - extrap_factor) + extrap * extrap_factor : extrap;
  }
  // De-interleave: [x0, x2, ...] then [x1, x3, ...]; rotate halves; result stays de-interleaved.
  std::vector<double> a(dim / 2), b(dim / 2), out(dim);
  for (int i = 0; i < dim / 2; ++i) {
    a[i] = x[2 * i];
    b[i] = x[2 * i + 1];
  }
  for (int i = 0; i < dim / 2; ++i) {
    double th = pos * inv[i], c = std::cos(th) * attention_factor, s = std::sin(th) * attention_factor;
    out[i] = a[i] * c - b[i] * s;
    out[dim / 2 + i] = b[i] * c + a[i] * s;
  }
  return out;
}

TEST(Rope, MatchesTransformersInterleavedYarn) {
  for (bool yarn : {false, true}) {
    RopeParams p;
    p.n_dims = 16;
    p.freq_base = 10000;
    if (yarn) {
      p.freq_scale = 0.25;
      p.ext_factor = 1;
      p.n_ctx_orig = 4096;
      p.attn_factor = 1.1386;
    }
    for (int64_t pos : {0, 3, 127, 5000}) {
      auto xf = randn(16, 40 + pos);
      std::vector<double> xd(xf.begin(), xf.end());
      auto want = transformers_rope(xd, 16, 10000, 4, 4096, p.attn_factor, pos, yarn);
      rope_ref(p, pos, xf.data());
      // Ours keeps pairs adjacent; transformers' output is de-interleaved.
      for (int i = 0; i < 8; ++i) {
        EXPECT_NEAR(xf[2 * i], want[i], 1e-5) << pos;
        EXPECT_NEAR(xf[2 * i + 1], want[8 + i], 1e-5) << pos;
      }
    }
  }
}

TEST(Rope, YarnCorrDimsOfDeepseekV3) {
  // DeepSeek-V3: rope dim 64, base 10000, original context 4096, beta 32/1:
  // low = floor(64 ln(4096 / (32 2π)) / (2 ln 10000)) = floor(10.47) = 10,
  // high = ceil(64 ln(4096 / (2π)) / (2 ln 10000)) = ceil(22.51) = 23.
  RopeParams p;
  p.n_dims = 64;
  p.freq_base = 10000;
  p.n_ctx_orig = 4096;
  double dims[2];
  rope_yarn_corr_dims(p, dims);
  EXPECT_EQ(dims[0], 10);
  EXPECT_EQ(dims[1], 23);
}

}  // namespace
}  // namespace mla
