// AVX-512 (F/BW/VL/VNNI) dot products of ik_llama.cpp's trellis types against Q8_K (scalar twins
// in trellis.cpp, AVX2 ones in trellis_avx2.cpp).
//
// A super-block's group start states (index + offset) are built in vectors, one lane per group.
// One vpmulld by the multiplier's powers then steps 16 states: two groups of 8 (four of 4 for
// IQ4_KT), elements 16j..16j+15 of the super-block in lane order. With s = x & 0x3f3f3f3f an
// element's level is (sum of the bytes of s) - 126, so its product with quant q is
// sum_k byte_k(s) * q - 126 q: one vpdpbusd of s against q repeated in the four bytes of its
// lane, and a correction from Q8_K's block sums. IQ3_KT's signed levels are formed first and
// enter vpdpbusd as level + 126 in byte 0. Every sum is exact in int32 (a block's is at most
// 252 * 128 * 32, times a scale of at most 127, over 8 blocks), and the float steps are the AVX2
// kernel's, so the results are bit-identical to it.
// GCC 12 flags the deliberately undefined pass-through operand of its own AVX-512 conversion
// intrinsics as maybe uninitialized.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include "quant/kernels.h"
#include "quant/trellis.h"

namespace mla::quant {
namespace {

constexpr int power(int k) {
  uint32_t p = 1;
  for (int i = 0; i < k; ++i) p *= kTrellisMul;
  return static_cast<int>(p);
}

inline __m512i lane_ids() { return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }

// Q8_K quants q[0..15], each repeated in the four bytes of its lane.
inline __m512i quants_x4(const int8_t* q) {
  const __m512i rep =
      _mm512_set_epi32(0x0f0f0f0f, 0x0e0e0e0e, 0x0d0d0d0d, 0x0c0c0c0c, 0x0b0b0b0b, 0x0a0a0a0a, 0x09090909, 0x08080808,
                       0x07070707, 0x06060606, 0x05050505, 0x04040404, 0x03030303, 0x02020202, 0x01010101, 0x00000000);
  const __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
  return _mm512_shuffle_epi8(v, rep);
}

inline __m512i load_u8x16(const uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// The masked states of elements 16j..16j+15 for groups of 8: lanes 0-7 step group 2j's start
// state by m^1..m^8, lanes 8-15 group 2j + 1's; start[h] holds groups 16h..16h+15.
inline __m512i states8(const __m512i start[2], int j) {
  const __m512i powers =
      _mm512_setr_epi32(power(1), power(2), power(3), power(4), power(5), power(6), power(7), power(8), power(1),
                        power(2), power(3), power(4), power(5), power(6), power(7), power(8));
  const __m512i pick = _mm512_add_epi32(_mm512_set1_epi32(2 * (j % 8)), _mm512_srli_epi32(lane_ids(), 3));
  const __m512i x = _mm512_mullo_epi32(_mm512_permutexvar_epi32(pick, start[j / 8]), powers);
  return _mm512_and_si512(x, _mm512_set1_epi32(0x3f3f3f3f));
}

// Start states of the 32 groups of 8 whose 16-bit indices are at ql (IQ2_KT, IQ3_KT).
inline void starts_u16(const uint8_t* ql, __m512i start[2]) {
  for (int h = 0; h < 2; ++h) {
    const __m256i idx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32 * h));
    start[h] = _mm512_add_epi32(_mm512_cvtepu16_epi32(idx), _mm512_set1_epi32(kTrellisOffset));
  }
}

struct Iq1Kt {
  using Block = BlockIQ1_KT;
  static constexpr int kStarts = 2;
  static int scale(const Block& b, int ib) { return kIQ4KValues[b.sh[ib] & 0x0F]; }
  // Index of group g = 16h + l: ql[g], bits 8-11 from a nibble of qh[l], bit 12 from sh[g / 4].
  static void starts(const Block& b, __m512i start[2]) {
    const __m512i qh = load_u8x16(b.qh);
    const __m512i sh = _mm512_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.sh)));
    const __m512i shift = _mm512_add_epi32(_mm512_and_si512(lane_ids(), _mm512_set1_epi32(3)), _mm512_set1_epi32(4));
    for (int h = 0; h < 2; ++h) {
      const __m512i hi = h == 0 ? _mm512_and_si512(qh, _mm512_set1_epi32(0x0F)) : _mm512_srli_epi32(qh, 4);
      const __m512i pick = _mm512_add_epi32(_mm512_set1_epi32(4 * h), _mm512_srli_epi32(lane_ids(), 2));
      const __m512i bit =
          _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(pick, sh), shift), _mm512_set1_epi32(1));
      __m512i idx = _mm512_or_si512(load_u8x16(b.ql + 16 * h), _mm512_slli_epi32(hi, 8));
      idx = _mm512_or_si512(idx, _mm512_slli_epi32(bit, 12));
      start[h] = _mm512_add_epi32(idx, _mm512_set1_epi32(kTrellisOffset));
    }
  }
  static __m512i states(const Block&, const __m512i* start, int j) { return states8(start, j); }
};

struct Iq2Kt {
  using Block = BlockIQ2_KT;
  static constexpr int kStarts = 2;
  static int scale(const Block& b, int ib) { return kIQ4KValues[kt_half_scale_index(b.scales, ib)]; }
  static void starts(const Block& b, __m512i start[2]) { starts_u16(b.ql, start); }
  static __m512i states(const Block&, const __m512i* start, int j) { return states8(start, j); }
};

struct Iq3Kt {
  using Block = BlockIQ3_KT;
  static constexpr int kStarts = 2;
  static int scale(const Block& b, int ib) { return kt_half_scale_index(b.scales, ib); }
  static void starts(const Block& b, __m512i start[2]) { starts_u16(b.ql, start); }
  // Signed level + 126 in byte 0 of each lane: element k of group g (block g / 4) takes its sign
  // from bit g / 4 of qh[8 (g % 4) + k], so lanes 0-15 of step j read qh[16 (j % 2) + lane].
  static __m512i states(const Block& b, const __m512i* start, int j) {
    const __m512i bias = _mm512_set1_epi32(126);
    const __m512i sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), states8(start, j), _mm512_set1_epi8(1));
    const __m512i mag = _mm512_abs_epi32(_mm512_sub_epi32(sum, bias));
    const __m128i qh = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qh + 16 * (j % 2)));
    const __mmask16 neg = _mm_test_epi8_mask(qh, _mm_set1_epi8(static_cast<char>(1 << (j / 2))));
    return _mm512_add_epi32(_mm512_mask_sub_epi32(mag, neg, _mm512_setzero_si512(), mag), bias);
  }
};

struct Iq4Kt {
  using Block = BlockIQ4_KT;
  static constexpr int kStarts = 4;
  static int scale(const Block& b, int ib) { return iq4_kt_scale(b, ib); }
  // Group g = 16h + l (4 elements): index ql[g] | (nibble of qh[g % 32]) << 8 | 3 bits of block
  // word g / 8 << 12, plus the offset that word's bit 0 selects.
  static void starts(const Block& b, __m512i start[4]) {
    const auto* ql = reinterpret_cast<const uint8_t*>(b.qs + 8);
    const __m512i words = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)));
    const __m512i shift =
        _mm512_add_epi32(_mm512_mullo_epi32(_mm512_and_si512(lane_ids(), _mm512_set1_epi32(7)), _mm512_set1_epi32(3)),
                         _mm512_set1_epi32(8));
    for (int h = 0; h < 4; ++h) {
      const __m512i qh = load_u8x16(ql + 64 + 16 * (h % 2));
      const __m512i hi = h < 2 ? _mm512_and_si512(qh, _mm512_set1_epi32(0x0F)) : _mm512_srli_epi32(qh, 4);
      const __m512i pick = _mm512_add_epi32(_mm512_set1_epi32(2 * h), _mm512_srli_epi32(lane_ids(), 3));
      const __m512i word = _mm512_permutexvar_epi32(pick, words);
      const __m512i bits = _mm512_and_si512(_mm512_srlv_epi32(word, shift), _mm512_set1_epi32(7));
      __m512i idx = _mm512_or_si512(load_u8x16(ql + 16 * h), _mm512_slli_epi32(hi, 8));
      idx = _mm512_or_si512(idx, _mm512_slli_epi32(bits, 12));
      const __m512i high = _mm512_slli_epi32(_mm512_and_si512(word, _mm512_set1_epi32(1)), 15);
      start[h] = _mm512_add_epi32(_mm512_add_epi32(idx, high), _mm512_set1_epi32(kTrellisOffset));
    }
  }
  // Elements 16j..16j+15: four groups of 4, lanes 4k..4k+3 stepping group 4j + k by m^1..m^4.
  static __m512i states(const Block&, const __m512i* start, int j) {
    const __m512i powers =
        _mm512_setr_epi32(power(1), power(2), power(3), power(4), power(1), power(2), power(3), power(4), power(1),
                          power(2), power(3), power(4), power(1), power(2), power(3), power(4));
    const __m512i pick = _mm512_add_epi32(_mm512_set1_epi32(4 * (j % 4)), _mm512_srli_epi32(lane_ids(), 2));
    const __m512i x = _mm512_mullo_epi32(_mm512_permutexvar_epi32(pick, start[j / 4]), powers);
    return _mm512_and_si512(x, _mm512_set1_epi32(0x3f3f3f3f));
  }
};

// Sum over the super-block of (level + 126) * q times the block scales, minus 126 * the block
// scales times the blocks' quant sums: the integer the AVX2 kernel sums.
template <typename Kind>
int32_t superblock_dot(const typename Kind::Block& b, const BlockQ8_K& y) {
  __m512i start[Kind::kStarts];
  Kind::starts(b, start);
  __m512i total = _mm512_setzero_si512();
  int32_t bias = 0;
  // Unrolled, so that the start states stay in registers and every permutation is a constant.
#pragma GCC unroll 8
  for (int ib = 0; ib < 8; ++ib) {
    const int scale = Kind::scale(b, ib);
    __m512i acc = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h) {
      const int j = 2 * ib + h;
      acc = _mm512_dpbusd_epi32(acc, Kind::states(b, start, j), quants_x4(y.qs + 16 * j));
    }
    total = _mm512_add_epi32(total, _mm512_mullo_epi32(acc, _mm512_set1_epi32(scale)));
    bias += scale * (y.bsums[2 * ib] + y.bsums[2 * ib + 1]);
  }
  return _mm512_reduce_add_epi32(total) - 126 * bias;
}

template <typename Kind>
float dot_kt(int64_t n, const void* w, const void* a) {
  using Block = typename Kind::Block;
  const float d = kt_row_scale(w);
  const auto* x = reinterpret_cast<const Block*>(static_cast<const uint8_t*>(w) + 4);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) sum += y[i].d * static_cast<float>(superblock_dot<Kind>(x[i], y[i]));
  return d * sum;
}

}  // namespace

VecDotFn vec_dot_kt_avx512_fn(GgmlType t) {
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
