// Quantizers for the 4-bit index formats IQ4_NL, IQ4_XS and MXFP4, without an importance matrix.
//
// They follow the algorithms llama.cpp's llama-quantize runs for these types (written from its
// description), so the output is byte-identical with it:
//  - IQ4_NL / IQ4_XS: per 32 values, weights x^2; start from the scale that maps the value of
//    largest magnitude onto the table's first level (-127), then try the 15 inverse scales
//    (k - 127)/max, k = -7..7, keeping the least-squares scale that explains the most weighted
//    energy. IQ4_NL stores that scale in fp16; IQ4_XS quantizes the 8 scales to signed 6 bits
//    against d = -max_scale/32. Each value then takes the nearest table level for its final scale.
//  - MXFP4: a power-of-two scale 2^(floor(log2 amax) - 2) (so amax lands in [4, 8) of E2M1's
//    doubled range [0, 12]) and the nearest E2M1 value per element.
// Sums and products round separately (no FMA contraction), as in ggml's portable build.
#include "quant/kernels.h"
MLA_NO_FP_CONTRACT

#include <algorithm>
#include <cmath>
#include <cstring>

#include "util/ggml_blocks.h"

namespace mla::quant {
namespace {

// The index of the level of kIQ4NLValues nearest to v (the upper one on a tie: a value exactly
// between two levels takes the higher). Every decision boundary is a multiple of 1/2, so the
// answer only depends on floor(2v): one table lookup.
struct Iq4LevelTable {
  static constexpr int kLo = 2 * -127, kHi = 2 * 113;
  uint8_t index[kHi - kLo + 1];
  constexpr Iq4LevelTable() : index() {
    for (int m = kLo; m <= kHi; ++m) {
      // v in [m/2, (m+1)/2): the level nearest to m/2 + 1/4 decides.
      const float v = 0.5f * static_cast<float>(m) + 0.25f;
      int k = 0;
      while (k < 15 && v - kIQ4NLValues[k] >= kIQ4NLValues[k + 1] - v) ++k;
      index[m - kLo] = static_cast<uint8_t>(k);
    }
  }
};
constexpr Iq4LevelTable kIq4Levels;

int nearest_iq4_level(float v) {
  if (!(v > kIQ4NLValues[0])) return 0;  // also NaN
  if (v >= kIQ4NLValues[15]) return 15;
  return kIq4Levels.index[static_cast<int>(std::floor(2 * v)) - Iq4LevelTable::kLo];
}

// The weighted least-squares scale of 32 values x against the table, searched as described
// above. 0 for a block of (near) zeros.
float fit_iq4_scale(const float* x) {
  float w[kQK];
  float amax = 0, max = 0;
  for (int j = 0; j < kQK; ++j) {
    w[j] = x[j] * x[j];
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  if (amax < 1e-15f) return 0.0f;
  auto sums = [&](float inv, float* sum_qx, float* sum_q2) {
    *sum_qx = *sum_q2 = 0;
    for (int j = 0; j < kQK; ++j) {
      const float q = kIQ4NLValues[nearest_iq4_level(inv * x[j])];
      *sum_qx += w[j] * q * x[j];
      *sum_q2 += w[j] * q * q;
    }
  };
  float sum_qx, sum_q2;
  sums(1 / (-max / kIQ4NLValues[0]), &sum_qx, &sum_q2);
  float d = sum_q2 > 0 ? sum_qx / sum_q2 : 0.0f;
  float best = d * sum_qx;
  for (int k = -7; k <= 7; ++k) {
    sums(static_cast<float>(k + kIQ4NLValues[0]) / max, &sum_qx, &sum_q2);
    if (sum_q2 > 0 && sum_qx * sum_qx > best * sum_q2) {
      d = sum_qx / sum_q2;
      best = d * sum_qx;
    }
  }
  return d;
}

// 32 values at inverse scale inv into IQ4_NL nibbles: element j low nibble of qs[j], j+16 high.
void pack_iq4_levels(const float* x, float inv, uint8_t* qs) {
  for (int j = 0; j < kQK / 2; ++j)
    qs[j] = static_cast<uint8_t>(nearest_iq4_level(inv * x[j]) | nearest_iq4_level(inv * x[j + 16]) << 4);
}

void quantize_iq4_nl(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<BlockIQ4_NL*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    const float d = fit_iq4_scale(x);
    b[i].d = fp32_to_fp16(d);
    // Levels against the unrounded scale (as llama-quantize does).
    pack_iq4_levels(x, d != 0.0f ? 1 / d : 0.0f, b[i].qs);
  }
}

void quantize_iq4_xs(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<BlockIQ4_XS*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float scales[8];
    float max_scale = 0, amax_scale = 0;
    for (int s = 0; s < 8; ++s) {
      scales[s] = fit_iq4_scale(x + kQK * s);
      if (std::fabs(scales[s]) > amax_scale) {
        amax_scale = std::fabs(scales[s]);
        max_scale = scales[s];
      }
    }
    // Signed 6-bit sub-block scales l in [-32, 31]: the largest maps to -32. The levels use the
    // unrounded d (as llama-quantize does); d is stored in fp16.
    const float d = -max_scale / 32;
    b[i].d = fp32_to_fp16(d);
    const float inv_d = d != 0.0f ? 1 / d : 0.0f;
    b[i].scales_h = 0;
    std::memset(b[i].scales_l, 0, sizeof b[i].scales_l);
    for (int s = 0; s < 8; ++s) {
      const int l = std::clamp(nearest_int(inv_d * scales[s]), -32, 31);
      const float dl = d * static_cast<float>(l);
      pack_iq4_levels(x + kQK * s, dl != 0.0f ? 1 / dl : 0.0f, b[i].qs + 16 * s);
      const int u = l + 32;
      b[i].scales_l[s / 2] |= static_cast<uint8_t>((u & 0xF) << (4 * (s % 2)));
      b[i].scales_h |= static_cast<uint16_t>((u >> 4) << (2 * s));
    }
  }
}

// The E2M1 code (index into kMXFP4Values) nearest to x at scale d; the first on a tie.
int nearest_mxfp4_code(float x, float d) {
  int best = 0;
  float best_err = std::fabs(kMXFP4Values[0] * d - x);
  for (int k = 1; k < 16; ++k) {
    const float err = std::fabs(kMXFP4Values[k] * d - x);
    if (err < best_err) {
      best = k;
      best_err = err;
    }
  }
  return best;
}

void quantize_mxfp4(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<BlockMXFP4*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax = 0;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    // E8M0 exponent e for 2^(floor(log2 amax) - 2); clamped to the format's range (ggml leaves
    // values below 2^-125 undefined).
    const float e = amax > 0 ? std::floor(std::log2(amax)) - 2 + 127 : 0.0f;
    b[i].e = static_cast<uint8_t>(std::clamp(e, 0.0f, 255.0f));
    const float d = e8m0_to_fp32_half(b[i].e);
    for (int j = 0; j < kQK / 2; ++j)
      b[i].qs[j] = static_cast<uint8_t>(nearest_mxfp4_code(x[j], d) | nearest_mxfp4_code(x[j + 16], d) << 4);
  }
}

}  // namespace

QuantizeFn quantize_iq4_ref_fn(GgmlType t) {
  switch (t) {
    case GgmlType::IQ4_NL:
      return quantize_iq4_nl;
    case GgmlType::IQ4_XS:
      return quantize_iq4_xs;
    case GgmlType::MXFP4:
      return quantize_mxfp4;
    default:
      return nullptr;
  }
}

}  // namespace mla::quant
