// AVX2 dot products of the lattice i-quants (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
// IQ3_S) against Q8_K activations; the scalar twins are in iquants.cpp.
//
// Each 32-value chunk of a super-block becomes 32 signed int8 levels in one register: the grid
// points (a table load per group of 8) with their signs applied by vpsignb from a byte mask, or
// for IQ1 8 * grid + shift (the ±1/8 shift folded into the integer level). Levels times
// activations (vpmaddubsw on |level| and the activation carrying the level's sign), times the
// groups' odd integer scales (vpmaddwd), summed in int32: exact. One float product per
// super-block: d * d_a / kDen * sum. The reference sums the same integers and scales in double,
// so the two differ by float rounding only (tests/quant/dot_test.cpp states the tolerance).
//
// Range: |level| <= 63 (IQ3 grids; IQ1: 9), |a| <= 127, odd scales <= 31, so the int16 pair sums
// stay below 2^14 and a super-block's int32 sum below 2^27.
#include <cstring>
#include <type_traits>

#include "quant/iq_grids.h"
#include "quant/kernels.h"
#include "quant/simd_avx2.h"
#include "util/ggml_blocks.h"

namespace mla::quant {
namespace {

using namespace avx2;

// Byte j of entry s: 0xFF (negate) when bit j of s is set, else 0x01 (keep) — vpsignb's operand.
struct SignMasks {
  uint64_t m[256];
  constexpr SignMasks() : m() {
    for (int s = 0; s < 256; ++s) {
      uint64_t v = 0;
      for (int j = 0; j < 8; ++j) v |= static_cast<uint64_t>((s >> j) & 1 ? 0xFF : 0x01) << (8 * j);
      m[s] = v;
    }
  }
};
constexpr SignMasks kSignMasks;

inline uint32_t load32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline __m256i four_u64(uint64_t g0, uint64_t g1, uint64_t g2, uint64_t g3) {
  return _mm256_set_epi64x(static_cast<int64_t>(g3), static_cast<int64_t>(g2), static_cast<int64_t>(g1),
                           static_cast<int64_t>(g0));
}

// Grid points of a 32-value chunk with signs applied (sign bytes s0..s3 of the four groups).
inline __m256i signed_levels(uint64_t g0, uint64_t g1, uint64_t g2, uint64_t g3, uint8_t s0, uint8_t s1, uint8_t s2,
                             uint8_t s3) {
  return _mm256_sign_epi8(four_u64(g0, g1, g2, g3),
                          four_u64(kSignMasks.m[s0], kSignMasks.m[s1], kSignMasks.m[s2], kSignMasks.m[s3]));
}

// IQ1: 8 * grid (grid bytes are -1, 0, 1) plus the per-group shift (±1), as int8.
inline __m256i iq1_levels(uint64_t g0, uint64_t g1, uint64_t g2, uint64_t g3, int sh0, int sh1, int sh2, int sh3) {
  const __m256i grid8 = _mm256_and_si256(_mm256_slli_epi16(four_u64(g0, g1, g2, g3), 3), _mm256_set1_epi8(-8));
  const auto bytes = [](int sh) { return static_cast<uint64_t>(static_cast<uint8_t>(sh)) * 0x0101010101010101ull; };
  return _mm256_add_epi8(grid8, four_u64(bytes(sh0), bytes(sh1), bytes(sh2), bytes(sh3)));
}

// A chunk: 32 signed levels and the four groups' odd scales (int16, in a uint64).
struct Chunk {
  __m256i q;
  uint64_t ls;
};
inline uint64_t same_scale(uint32_t s) { return static_cast<uint64_t>(2 * s + 1) * 0x0001000100010001ull; }
inline uint64_t pair_scales(uint32_t s_lo, uint32_t s_hi) {
  return static_cast<uint64_t>(2 * s_lo + 1) * 0x0000000000010001ull +
         static_cast<uint64_t>(2 * s_hi + 1) * 0x0001000100000000ull;
}

struct IQ2XXS {
  static constexpr int kBytes = 66, kDen = 8;
  static Chunk chunk(const uint8_t* b, int ib) {
    const uint8_t* qs = b + 2 + 8 * ib;
    const uint32_t idx = load32(qs), aux = load32(qs + 4);
    return {signed_levels(kIQ2XXSGrid[idx & 0xff], kIQ2XXSGrid[(idx >> 8) & 0xff], kIQ2XXSGrid[(idx >> 16) & 0xff],
                          kIQ2XXSGrid[idx >> 24], kIQSigns[aux & 127], kIQSigns[(aux >> 7) & 127],
                          kIQSigns[(aux >> 14) & 127], kIQSigns[(aux >> 21) & 127]),
            same_scale(aux >> 28)};
  }
};

struct IQ2XS {
  static constexpr int kBytes = 74, kDen = 8;
  static Chunk chunk(const uint8_t* b, int ib) {
    uint16_t v[4];
    std::memcpy(v, b + 2 + 8 * ib, 8);
    const uint8_t sc = b[2 + 64 + ib];
    return {
        signed_levels(kIQ2XSGrid[v[0] & 511], kIQ2XSGrid[v[1] & 511], kIQ2XSGrid[v[2] & 511], kIQ2XSGrid[v[3] & 511],
                      kIQSigns[v[0] >> 9], kIQSigns[v[1] >> 9], kIQSigns[v[2] >> 9], kIQSigns[v[3] >> 9]),
        pair_scales(sc & 0xf, sc >> 4)};
  }
};

struct IQ2S {
  static constexpr int kBytes = 82, kDen = 8;
  static Chunk chunk(const uint8_t* b, int ib) {
    const uint8_t* qs = b + 2 + 4 * ib;
    const uint8_t* signs = b + 2 + 32 + 4 * ib;
    const uint8_t qh = b[2 + 64 + ib], sc = b[2 + 64 + 8 + ib];
    return {signed_levels(kIQ2SGrid[qs[0] | (qh & 3) << 8], kIQ2SGrid[qs[1] | ((qh >> 2) & 3) << 8],
                          kIQ2SGrid[qs[2] | ((qh >> 4) & 3) << 8], kIQ2SGrid[qs[3] | ((qh >> 6) & 3) << 8], signs[0],
                          signs[1], signs[2], signs[3]),
            pair_scales(sc & 0xf, sc >> 4)};
  }
};

inline uint64_t two_u32(uint32_t lo, uint32_t hi) { return lo | static_cast<uint64_t>(hi) << 32; }

struct IQ3XXS {
  static constexpr int kBytes = 98, kDen = 4;
  static Chunk chunk(const uint8_t* b, int ib) {
    const uint8_t* qs = b + 2 + 8 * ib;
    const uint32_t aux = load32(b + 2 + 64 + 4 * ib);
    const auto g = [&](int l) { return two_u32(kIQ3XXSGrid[qs[2 * l]], kIQ3XXSGrid[qs[2 * l + 1]]); };
    return {signed_levels(g(0), g(1), g(2), g(3), kIQSigns[aux & 127], kIQSigns[(aux >> 7) & 127],
                          kIQSigns[(aux >> 14) & 127], kIQSigns[(aux >> 21) & 127]),
            same_scale(aux >> 28)};
  }
};

struct IQ3S {
  static constexpr int kBytes = 110, kDen = 1;
  static Chunk chunk(const uint8_t* b, int ib) {
    const uint8_t* qs = b + 2 + 8 * ib;
    const uint8_t qh = b[2 + 64 + ib];
    const uint8_t* signs = b + 2 + 64 + 8 + 4 * ib;
    const uint8_t sc = b[2 + 64 + 8 + 32 + ib / 2];
    const auto g = [&](int l) {
      return two_u32(kIQ3SGrid[qs[2 * l] | ((qh >> (2 * l)) & 1) << 8],
                     kIQ3SGrid[qs[2 * l + 1] | ((qh >> (2 * l + 1)) & 1) << 8]);
    };
    return {signed_levels(g(0), g(1), g(2), g(3), signs[0], signs[1], signs[2], signs[3]),
            same_scale(ib % 2 == 0 ? sc & 0xf : sc >> 4)};
  }
};

struct IQ1S {
  static constexpr int kBytes = 50, kDen = 8;
  static Chunk chunk(const uint8_t* b, int ib) {
    const uint8_t* qs = b + 2 + 4 * ib;
    uint16_t h;
    std::memcpy(&h, b + 2 + 32 + 2 * ib, 2);
    const int sh = h & 0x8000 ? -1 : 1;
    const auto g = [&](int l) { return kIQ1SGrid[qs[l] | ((h >> (3 * l)) & 7) << 8]; };
    return {iq1_levels(g(0), g(1), g(2), g(3), sh, sh, sh, sh), same_scale((h >> 12) & 7)};
  }
};

// IQ1_M keeps its fp16 d in the top nibbles of the scale words (block_d reads it).
struct IQ1M {
  static constexpr int kBytes = 56, kDen = 8;
  static Chunk chunk(const uint8_t* b, int ib) {
    const uint8_t* qs = b + 4 * ib;
    const uint8_t h0 = b[32 + 2 * ib], h1 = b[32 + 2 * ib + 1];
    uint16_t sc;
    std::memcpy(&sc, b + 48 + 2 * (ib / 2), 2);
    const uint32_t s = sc >> (6 * (ib % 2));
    const uint8_t nib[4] = {static_cast<uint8_t>(h0 & 15), static_cast<uint8_t>(h0 >> 4), static_cast<uint8_t>(h1 & 15),
                            static_cast<uint8_t>(h1 >> 4)};
    const auto g = [&](int l) { return kIQ1SGrid[qs[l] | (nib[l] & 7) << 8]; };
    const auto sh = [&](int l) { return nib[l] & 8 ? -1 : 1; };
    return {iq1_levels(g(0), g(1), g(2), g(3), sh(0), sh(1), sh(2), sh(3)), pair_scales(s & 7, (s >> 3) & 7)};
  }
};

template <typename T>
float block_d(const uint8_t* b) {
  if constexpr (std::is_same_v<T, IQ1M>) {
    uint16_t sc[4];
    std::memcpy(sc, b + 48, 8);
    return half_to_float(
        static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000)));
  } else {
    uint16_t d;
    std::memcpy(&d, b, 2);
    return half_to_float(d);
  }
}

template <typename T>
float dot_iq(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const uint8_t*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  // pshufb control: int16 scale l of the uint64 into the 4 int16 lanes of group l.
  const __m256i expand = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3,  //
                                          4, 5, 4, 5, 4, 5, 4, 5, 6, 7, 6, 7, 6, 7, 6, 7);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const uint8_t* b = x + i * T::kBytes;
    __m256i sum = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ++ib) {
      const Chunk c = T::chunk(b, ib);
      const __m256i act = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs + 32 * ib));
      const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(c.q, c.q), _mm256_sign_epi8(act, c.q));
      const __m256i ls = _mm256_shuffle_epi8(_mm256_set1_epi64x(static_cast<int64_t>(c.ls)), expand);
      sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p, ls));
    }
    const float scale = block_d<T>(b) * y[i].d / static_cast<float>(T::kDen);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(scale), _mm256_cvtepi32_ps(sum), acc);
  }
  return hsum(acc);
}

}  // namespace

VecDotFn vec_dot_iq_avx2_fn(GgmlType t) {
  switch (t) {
    case GgmlType::IQ2_XXS:
      return dot_iq<IQ2XXS>;
    case GgmlType::IQ2_XS:
      return dot_iq<IQ2XS>;
    case GgmlType::IQ2_S:
      return dot_iq<IQ2S>;
    case GgmlType::IQ3_XXS:
      return dot_iq<IQ3XXS>;
    case GgmlType::IQ3_S:
      return dot_iq<IQ3S>;
    case GgmlType::IQ1_S:
      return dot_iq<IQ1S>;
    case GgmlType::IQ1_M:
      return dot_iq<IQ1M>;
    default:
      return nullptr;
  }
}

}  // namespace mla::quant
