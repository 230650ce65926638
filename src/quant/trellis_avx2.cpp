// AVX2 dot products of ik_llama.cpp's trellis types against Q8_K (scalar twins in trellis.cpp).
// A group's states x*m, x*m^2, ... are independent products of its start state with powers of
// the multiplier, so one vpmulld makes 8 (or 2 x 4) of them; the byte sums come from maddubs +
// madd. Levels times block scales fit in int16 (|126 * 127| < 2^15) and meet the Q8_K quants in
// madd, so each super-block's sum is exact in int32, as in the reference.
#include <cstdlib>

#include "quant/kernels.h"
#include "quant/simd_avx2.h"
#include "quant/trellis.h"

namespace mla::quant {
namespace {

using namespace avx2;

constexpr uint32_t trellis_power(int k) {
  uint32_t p = 1;
  for (int i = 0; i < k; ++i) p *= kTrellisMul;
  return p;
}

// Levels of the 8 elements of a group with start state x0 = index + offset.
inline __m256i levels8(uint32_t x0) {
  const __m256i powers = _mm256_setr_epi32(static_cast<int>(trellis_power(1)), static_cast<int>(trellis_power(2)),
                                           static_cast<int>(trellis_power(3)), static_cast<int>(trellis_power(4)),
                                           static_cast<int>(trellis_power(5)), static_cast<int>(trellis_power(6)),
                                           static_cast<int>(trellis_power(7)), static_cast<int>(trellis_power(8)));
  const __m256i x = _mm256_mullo_epi32(_mm256_set1_epi32(static_cast<int>(x0)), powers);
  const __m256i s = _mm256_and_si256(x, _mm256_set1_epi32(0x3f3f3f3f));
  const __m256i sum = _mm256_madd_epi16(_mm256_maddubs_epi16(s, _mm256_set1_epi8(1)), _mm256_set1_epi16(1));
  return _mm256_sub_epi32(sum, _mm256_set1_epi32(126));
}

// Levels of two 4-element groups (IQ4_KT) with start states x0 (lanes 0-3) and x1 (lanes 4-7).
inline __m256i levels4x2(uint32_t x0, uint32_t x1) {
  const auto p1 = static_cast<int>(trellis_power(1)), p2 = static_cast<int>(trellis_power(2));
  const auto p3 = static_cast<int>(trellis_power(3)), p4 = static_cast<int>(trellis_power(4));
  const __m256i powers = _mm256_setr_epi32(p1, p2, p3, p4, p1, p2, p3, p4);
  const __m256i start =
      _mm256_setr_epi32(static_cast<int>(x0), static_cast<int>(x0), static_cast<int>(x0), static_cast<int>(x0),
                        static_cast<int>(x1), static_cast<int>(x1), static_cast<int>(x1), static_cast<int>(x1));
  const __m256i s = _mm256_and_si256(_mm256_mullo_epi32(start, powers), _mm256_set1_epi32(0x3f3f3f3f));
  const __m256i sum = _mm256_madd_epi16(_mm256_maddubs_epi16(s, _mm256_set1_epi8(1)), _mm256_set1_epi16(1));
  return _mm256_sub_epi32(sum, _mm256_set1_epi32(126));
}

// One block of 32: levels v[0..3] (elements 8k..8k+7 in v[k]) times the integer block scale,
// dotted with the block's 32 Q8_K quants; adds 8 int32 partial sums to acc.
inline __m256i block_dot(const __m256i v[4], int scale, const int8_t* q, __m256i acc) {
  const __m256i sc = _mm256_set1_epi16(static_cast<int16_t>(scale));
  for (int h = 0; h < 2; ++h) {
    const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(v[2 * h], v[2 * h + 1]), 0xD8);
    const __m256i a = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16 * h)));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_mullo_epi16(w, sc), a));
  }
  return acc;
}

inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}

// Levels of the 4 groups of block ib, per type.
struct Iq1Kt {
  using Block = BlockIQ1_KT;
  static int scale(const Block& b, int ib) { return kIQ4KValues[b.sh[ib] & 0x0F]; }
  static void levels(const Block& b, int ib, __m256i v[4]) {
    for (int k = 0; k < 4; ++k) v[k] = levels8(iq1_kt_index(b, 4 * ib + k) + kTrellisOffset);
  }
};
struct Iq2Kt {
  using Block = BlockIQ2_KT;
  static int scale(const Block& b, int ib) { return kIQ4KValues[kt_half_scale_index(b.scales, ib)]; }
  static void levels(const Block& b, int ib, __m256i v[4]) {
    for (int k = 0; k < 4; ++k) v[k] = levels8(load_u16(b.ql + 2 * (4 * ib + k)) + kTrellisOffset);
  }
};
struct Iq3Kt {
  using Block = BlockIQ3_KT;
  static int scale(const Block& b, int ib) { return kt_half_scale_index(b.scales, ib); }
  static void levels(const Block& b, int ib, __m256i v[4]) {
    const __m256i bit = _mm256_set1_epi32(1 << ib);
    for (int k = 0; k < 4; ++k) {
      const __m256i mag = _mm256_abs_epi32(levels8(load_u16(b.ql + 2 * (4 * ib + k)) + kTrellisOffset));
      const __m256i qh = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qh + 8 * k)));
      const __m256i neg = _mm256_cmpeq_epi32(_mm256_and_si256(qh, bit), bit);
      v[k] = _mm256_sub_epi32(_mm256_xor_si256(mag, neg), neg);
    }
  }
};
struct Iq4Kt {
  using Block = BlockIQ4_KT;
  static int scale(const Block& b, int ib) { return iq4_kt_scale(b, ib); }
  static void levels(const Block& b, int ib, __m256i v[4]) {
    for (int k = 0; k < 4; ++k) {
      uint32_t off0 = 0, off1 = 0;
      const uint32_t i0 = iq4_kt_index(b, 8 * ib + 2 * k, &off0);
      const uint32_t i1 = iq4_kt_index(b, 8 * ib + 2 * k + 1, &off1);
      v[k] = levels4x2(i0 + off0, i1 + off1);
    }
  }
};

template <typename Kind>
float dot_kt(int64_t n, const void* w, const void* a) {
  using Block = typename Kind::Block;
  const float d = kt_row_scale(w);
  const auto* x = reinterpret_cast<const Block*>(static_cast<const uint8_t*>(w) + 4);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  __m256i v[4];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    __m256i acc = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ++ib) {
      Kind::levels(x[i], ib, v);
      acc = block_dot(v, Kind::scale(x[i], ib), y[i].qs + 32 * ib, acc);
    }
    sum += y[i].d * static_cast<float>(hsum_i32(acc));
  }
  return d * sum;
}

}  // namespace

VecDotFn vec_dot_kt_avx2_fn(GgmlType t) {
  switch (t) {
    case GgmlType::IQ1_KT:
      return dot_kt<Iq1Kt>;
    case GgmlType::IQ2_KT:
      return dot_kt<Iq2Kt>;
    case GgmlType::IQ3_KT:
      return dot_kt<Iq3Kt>;
    case GgmlType::IQ4_KT:
      return dot_kt<Iq4Kt>;
    default:
      return nullptr;
  }
}

}  // namespace mla::quant
