// The lattice i-quants llama.cpp writes for its smallest files (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS,
// IQ2_S, IQ3_XXS, IQ3_S): dequantization (bit-exact with ggml's dequantize_row_* and gguf-py)
// and scalar dot products against Q8_K activations (the reference twins).
//
// Every one of them cuts a 256-element super-block into groups of 8 (IQ2/IQ1) or 4 (IQ3)
// values that index a grid of allowed points (iq_grids.h, data of the format), with a sign
// per value (IQ2/IQ3; 7 stored bits, the 8th from kIQSigns' parity rule, or 8 plain bits for
// IQ2_S/IQ3_S) or a ±1/8 shift per group (IQ1), and a small odd integer scale per 16 or 32
// values on top of the block's fp16 scale:
//   IQ2_XXS  x = d * (2s+1)/8 * grid * sign      s: 4 bits per 32, in the top of the sign word
//   IQ2_XS   x = d * (2s+1)/8 * grid * sign      s: 4 bits per 16; 9-bit grid index + 7 sign bits
//   IQ2_S    x = d * (2s+1)/8 * grid * sign      10-bit index (2 high bits in qh), 8 sign bits
//   IQ3_XXS  x = d * (2s+1)/4 * grid * sign      grid points of 4 values
//   IQ3_S    x = d * (2s+1) * grid * sign        9-bit index (1 high bit in qh), 8 sign bits
//   IQ1_S    x = d * (2s+1) * (grid ± 1/8)       11-bit index; s and the shift's sign per 32
//   IQ1_M    x = d * (2s+1) * (grid ± 1/8)       s per 16, shift sign per 8, d spread over the
//                                                 top nibbles of the four scale words
// The dot products sum integers per group and scale once per group, so their only rounding
// is per-block (as in dot_ref.cpp).
#include "quant/iq_grids.h"
#include "quant/kernels.h"
#include "util/ggml_blocks.h"

MLA_NO_FP_CONTRACT

namespace mla::quant {
namespace {

constexpr float kIQ1Delta = 0.125f;

// The grid point's byte j.
inline uint8_t gbyte(uint64_t g, int j) { return static_cast<uint8_t>(g >> (8 * j)); }
inline int8_t gsbyte(uint64_t g, int j) { return static_cast<int8_t>(gbyte(g, j)); }
inline float sign_of(uint8_t signs, int j) { return (signs >> j) & 1 ? -1.f : 1.f; }
inline int isign_of(uint8_t signs, int j) { return (signs >> j) & 1 ? -1 : 1; }

uint32_t load32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

uint16_t iq1m_scale_bits(const BlockIQ1_M& b, uint16_t sc[4]) {
  std::memcpy(sc, b.scales, 8);
  return static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
}

// ------------------------------------------------------------------- unpacking
// Each block unpacks into 256 grid values q (signed integers, sign applied), a float per group
// of 8 that the group's values are multiplied by (dequantization), and the same as an integer
// numerator over a per-type denominator (dot products). IQ1 adds a shift of ±1/8 per group.
struct Unpacked {
  int8_t q[kQK_K];
  int32_t ls[kQK_K / 8];    // integer scale per group of 8
  float dl[kQK_K / 8];      // d * scale as dequantization computes it
  int8_t shift[kQK_K / 8];  // IQ1: +1 / -1 (times 1/8); others 0
  float d;
};

void unpack(const BlockIQ2_XXS& b, Unpacked& u) {
  u.d = fp16_to_fp32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t idx = load32(b.qs + 4 * ib), aux = load32(b.qs + 4 * ib + 2);
    const uint32_t s = aux >> 28;
    for (int l = 0; l < 4; ++l) {
      const uint64_t g = kIQ2XXSGrid[(idx >> (8 * l)) & 0xff];
      const uint8_t signs = kIQSigns[(aux >> (7 * l)) & 127];
      const int gi = ib * 4 + l;
      u.ls[gi] = static_cast<int32_t>(2 * s + 1);
      u.dl[gi] = u.d * (0.5f + static_cast<float>(s)) * 0.25f;
      u.shift[gi] = 0;
      for (int j = 0; j < 8; ++j) u.q[8 * gi + j] = static_cast<int8_t>(gbyte(g, j) * isign_of(signs, j));
    }
  }
}

void unpack(const BlockIQ2_XS& b, Unpacked& u) {
  u.d = fp16_to_fp32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    for (int l = 0; l < 4; ++l) {
      const uint16_t v = b.qs[4 * ib + l];
      const uint64_t g = kIQ2XSGrid[v & 511];
      const uint8_t signs = kIQSigns[v >> 9];
      const uint32_t s = l < 2 ? b.scales[ib] & 0xf : b.scales[ib] >> 4;
      const int gi = ib * 4 + l;
      u.ls[gi] = static_cast<int32_t>(2 * s + 1);
      u.dl[gi] = u.d * (0.5f + static_cast<float>(s)) * 0.25f;
      u.shift[gi] = 0;
      for (int j = 0; j < 8; ++j) u.q[8 * gi + j] = static_cast<int8_t>(gbyte(g, j) * isign_of(signs, j));
    }
  }
}

void unpack(const BlockIQ2_S& b, Unpacked& u) {
  u.d = fp16_to_fp32(b.d);
  const uint8_t* signs = b.qs + kQK_K / 8;
  for (int ib = 0; ib < 8; ++ib) {
    for (int l = 0; l < 4; ++l) {
      const int gi = ib * 4 + l;
      const uint64_t g = kIQ2SGrid[b.qs[gi] | ((b.qh[ib] >> (2 * l)) & 3) << 8];
      const uint32_t s = l < 2 ? b.scales[ib] & 0xf : b.scales[ib] >> 4;
      u.ls[gi] = static_cast<int32_t>(2 * s + 1);
      u.dl[gi] = u.d * (0.5f + static_cast<float>(s)) * 0.25f;
      u.shift[gi] = 0;
      for (int j = 0; j < 8; ++j) u.q[8 * gi + j] = static_cast<int8_t>(gbyte(g, j) * isign_of(signs[gi], j));
    }
  }
}

void unpack(const BlockIQ3_XXS& b, Unpacked& u) {
  u.d = fp16_to_fp32(b.d);
  const uint8_t* words = b.qs + kQK_K / 4;
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t aux = load32(words + 4 * ib);
    const uint32_t s = aux >> 28;
    for (int l = 0; l < 4; ++l) {
      const int gi = ib * 4 + l;
      const uint8_t signs = kIQSigns[(aux >> (7 * l)) & 127];
      const uint32_t g1 = kIQ3XXSGrid[b.qs[8 * ib + 2 * l]], g2 = kIQ3XXSGrid[b.qs[8 * ib + 2 * l + 1]];
      u.ls[gi] = static_cast<int32_t>(2 * s + 1);
      u.dl[gi] = u.d * (0.5f + static_cast<float>(s)) * 0.5f;
      u.shift[gi] = 0;
      for (int j = 0; j < 4; ++j) {
        u.q[8 * gi + j] = static_cast<int8_t>(gbyte(g1, j) * isign_of(signs, j));
        u.q[8 * gi + j + 4] = static_cast<int8_t>(gbyte(g2, j) * isign_of(signs, j + 4));
      }
    }
  }
}

void unpack(const BlockIQ3_S& b, Unpacked& u) {
  u.d = fp16_to_fp32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t s = ib % 2 == 0 ? b.scales[ib / 2] & 0xf : b.scales[ib / 2] >> 4;
    for (int l = 0; l < 4; ++l) {
      const int gi = ib * 4 + l;
      const int k = 2 * gi;  // the two grid indices of this group: qs[k], qs[k + 1]
      const uint32_t g1 = kIQ3SGrid[b.qs[k] | (((b.qh[ib] >> (2 * l)) & 1) << 8)];
      const uint32_t g2 = kIQ3SGrid[b.qs[k + 1] | (((b.qh[ib] >> (2 * l + 1)) & 1) << 8)];
      u.ls[gi] = static_cast<int32_t>(2 * s + 1);
      u.dl[gi] = u.d * static_cast<float>(1 + 2 * s);
      u.shift[gi] = 0;
      for (int j = 0; j < 4; ++j) {
        u.q[8 * gi + j] = static_cast<int8_t>(gbyte(g1, j) * isign_of(b.signs[gi], j));
        u.q[8 * gi + j + 4] = static_cast<int8_t>(gbyte(g2, j) * isign_of(b.signs[gi], j + 4));
      }
    }
  }
}

void unpack(const BlockIQ1_S& b, Unpacked& u) {
  u.d = fp16_to_fp32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    const uint16_t h = b.qh[ib];
    const uint32_t s = (h >> 12) & 7;
    for (int l = 0; l < 4; ++l) {
      const int gi = ib * 4 + l;
      const uint64_t g = kIQ1SGrid[b.qs[gi] | (((h >> (3 * l)) & 7) << 8)];
      u.ls[gi] = static_cast<int32_t>(2 * s + 1);
      u.dl[gi] = u.d * static_cast<float>(2 * s + 1);
      u.shift[gi] = h & 0x8000 ? -1 : 1;
      for (int j = 0; j < 8; ++j) u.q[8 * gi + j] = gsbyte(g, j);
    }
  }
}

void unpack(const BlockIQ1_M& b, Unpacked& u) {
  uint16_t sc[4];
  u.d = fp16_to_fp32(iq1m_scale_bits(b, sc));
  for (int ib = 0; ib < 8; ++ib) {
    for (int l = 0; l < 4; ++l) {
      const int gi = ib * 4 + l;
      const uint8_t h = b.qh[2 * ib + l / 2] >> (4 * (l % 2));  // this group's nibble
      const uint64_t g = kIQ1SGrid[b.qs[gi] | ((h & 7) << 8)];
      const uint32_t s = (sc[ib / 2] >> (6 * (ib % 2) + 3 * (l / 2))) & 7;
      u.ls[gi] = static_cast<int32_t>(2 * s + 1);
      u.dl[gi] = u.d * static_cast<float>(2 * s + 1);
      u.shift[gi] = h & 8 ? -1 : 1;
      for (int j = 0; j < 8; ++j) u.q[8 * gi + j] = gsbyte(g, j);
    }
  }
}

// ------------------------------------------------------------------- kernels

template <typename Block>
void dequant(const void* src, float* dst, int64_t n) {
  const Block* x = static_cast<const Block*>(src);
  Unpacked u;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    unpack(x[i], u);
    float* y = dst + i * kQK_K;
    for (int gi = 0; gi < kQK_K / 8; ++gi) {
      if (u.shift[gi] == 0) {
        // dl * |grid| * sign, in that order (the sign makes the product exact either way).
        for (int j = 0; j < 8; ++j) {
          const int q = u.q[8 * gi + j];
          y[8 * gi + j] = u.dl[gi] * static_cast<float>(q < 0 ? -q : q) * (q < 0 ? -1.f : 1.f);
        }
      } else {
        const float delta = u.shift[gi] < 0 ? -kIQ1Delta : kIQ1Delta;
        for (int j = 0; j < 8; ++j) y[8 * gi + j] = u.dl[gi] * (static_cast<float>(u.q[8 * gi + j]) + delta);
      }
    }
  }
}

// The value scale is d * ls / kDen (kDen: 8 for IQ2, 4 for IQ3_XXS, 1 for IQ3_S and IQ1); IQ1's
// shift adds ls * shift/8 * sum(a) per group.
template <typename Block, int kDen>
float dot(int64_t n, const void* w, const void* a) {
  const Block* x = static_cast<const Block*>(w);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(a);
  Unpacked u;
  double sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    unpack(x[i], u);
    int64_t sum_q = 0, sum_shift = 0;
    for (int gi = 0; gi < kQK_K / 8; ++gi) {
      int32_t s = 0, sa = 0;
      for (int j = 0; j < 8; ++j) {
        s += u.q[8 * gi + j] * y[i].qs[8 * gi + j];
        sa += y[i].qs[8 * gi + j];
      }
      sum_q += static_cast<int64_t>(u.ls[gi]) * s;
      sum_shift += static_cast<int64_t>(u.ls[gi]) * u.shift[gi] * sa;
    }
    const double scale = static_cast<double>(u.d) * y[i].d / kDen;
    sum += scale * (static_cast<double>(sum_q) + static_cast<double>(sum_shift) * kIQ1Delta);
  }
  return static_cast<float>(sum);
}

}  // namespace

DequantizeFn dequantize_iq_ref_fn(GgmlType t) {
  switch (t) {
    case GgmlType::IQ2_XXS:
      return dequant<BlockIQ2_XXS>;
    case GgmlType::IQ2_XS:
      return dequant<BlockIQ2_XS>;
    case GgmlType::IQ2_S:
      return dequant<BlockIQ2_S>;
    case GgmlType::IQ3_XXS:
      return dequant<BlockIQ3_XXS>;
    case GgmlType::IQ3_S:
      return dequant<BlockIQ3_S>;
    case GgmlType::IQ1_S:
      return dequant<BlockIQ1_S>;
    case GgmlType::IQ1_M:
      return dequant<BlockIQ1_M>;
    default:
      return nullptr;
  }
}

VecDotFn vec_dot_iq_ref_fn(GgmlType t) {
  switch (t) {
    case GgmlType::IQ2_XXS:
      return dot<BlockIQ2_XXS, 8>;
    case GgmlType::IQ2_XS:
      return dot<BlockIQ2_XS, 8>;
    case GgmlType::IQ2_S:
      return dot<BlockIQ2_S, 8>;
    case GgmlType::IQ3_XXS:
      return dot<BlockIQ3_XXS, 4>;
    case GgmlType::IQ3_S:
      return dot<BlockIQ3_S, 1>;
    case GgmlType::IQ1_S:
      return dot<BlockIQ1_S, 1>;
    case GgmlType::IQ1_M:
      return dot<BlockIQ1_M, 1>;
    default:
      return nullptr;
  }
}

}  // namespace mla::quant
