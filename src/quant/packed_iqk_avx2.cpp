// AVX2 GEMM over the packed groups of ik_llama.cpp's table k-quants (layouts in packed_iqk.h),
// for CPUs without AVX-512 VNNI; the entries are read as two halves of 8 rows (packed_avx2.h).
// vpshufb maps the indices to signed levels (IQ5, IQ6: two or four tables, the index bits above
// the nibble choosing per byte; IQ2_KL: a pair's two levels from two 32-entry tables) and a row's
// extra bit adds the table shift to its 4 bytes; vpmaddubsw then takes |a| unsigned and the level
// with a's sign: |level| <= 127, so a pair sum is at most 2 x 128 x 127 whatever a is, and
// vpmaddwd multiplies the pairs by the row's group scale (|scale| <= 127) into int32. The float
// steps per (row, token) are the scalar twin's, in its order (packed_iqk.cpp), so results are
// bit-identical to it whatever the number of tokens in the call.
#include <immintrin.h>

#include <array>
#include <cstring>

#include "quant/kernels.h"
#include "quant/packed_avx2.h"
#include "quant/packed_iqk.h"

namespace mla::quant {
namespace {

using namespace avx2p;

// The signed levels of table entries 16h..16h+15 in both 128-bit lanes.
template <GgmlType kType, int kHalf>
inline __m256i table() {
  return _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(iqk_packed_spec(kType).table + 16 * kHalf)));
}

// Rows 8h..8h+7 of one sub-block: the extra bits as lane masks (lane r = row r's 4 bytes) and the
// group scales as int16 pairs, for its low and high 16 columns.
struct SubBlockHalf {
  __m256i extra_lo, extra_hi, scale_lo, scale_hi;
};

// Bits 8h..8h+7 of a 16-row mask, as all-ones lanes.
inline __m256i row_mask(uint16_t bits, int h) {
  const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(bits >> (8 * h)), sel), sel);
}

template <GgmlType kType>
inline SubBlockHalf sub_block(const uint8_t* blk, int s, int h) {
  constexpr IqkPackedSpec sp = iqk_packed_spec(kType);
  SubBlockHalf sb;
  if constexpr (sp.row_scaled()) {
    const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + sp.scale_offset() + 16 * s + 8 * h));
    const __m256i one = _mm256_set1_epi32(1);
    sb.extra_lo = sb.extra_hi = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_cvtepu8_epi32(v), one), one);
    const __m256i pairs = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(v, v));
    sb.scale_lo = sb.scale_hi =
        _mm256_sub_epi16(_mm256_and_si256(pairs, _mm256_set1_epi16(254)), _mm256_set1_epi16(127));
  } else {
    uint16_t lo, hi;
    std::memcpy(&lo, blk + sp.extra_offset() + 4 * s, 2);
    std::memcpy(&hi, blk + sp.extra_offset() + 4 * s + 2, 2);
    sb.extra_lo = row_mask(lo, h);
    sb.extra_hi = row_mask(hi, h);
    sb.scale_lo = i8_pairs(blk + 32 + 32 * s + 8 * h);
    sb.scale_hi = i8_pairs(blk + 48 + 32 * s + 8 * h);
  }
  return sb;
}

// The table quarters kType uses.
template <GgmlType kType>
struct Tables {
  __m256i q[4];
  Tables() {
    q[0] = q[1] = q[2] = q[3] = table<kType, 0>();
    if constexpr (iqk_packed_spec(kType).high_bits >= 1) q[1] = table<kType, 1>();
    if constexpr (iqk_packed_spec(kType).high_bits == 2) {
      q[2] = table<kType, 2>();
      q[3] = table<kType, 3>();
    }
  }
};

// Bytes of v with bit `bit` set, as all-ones bytes.
inline __m256i bit_set(__m256i v, int bit) {
  const __m256i m = _mm256_set1_epi8(static_cast<char>(1 << bit));
  return _mm256_cmpeq_epi8(_mm256_and_si256(v, m), m);
}

// The signed levels of 8 rows x 4 columns: idx the 4 low index bits, b4 / b5 the bytes whose
// index bit 4 / 5 is set (IQ5, IQ6), extra the rows whose group takes the shifted table.
template <GgmlType kType>
inline __m256i levels(__m256i idx, __m256i b4, __m256i b5, __m256i extra, const Tables<kType>& t) {
  constexpr IqkPackedSpec sp = iqk_packed_spec(kType);
  __m256i v = _mm256_shuffle_epi8(t.q[0], idx);
  if constexpr (sp.high_bits >= 1) v = _mm256_blendv_epi8(v, _mm256_shuffle_epi8(t.q[1], idx), b4);
  if constexpr (sp.high_bits == 2) {
    const __m256i w = _mm256_blendv_epi8(_mm256_shuffle_epi8(t.q[2], idx), _mm256_shuffle_epi8(t.q[3], idx), b4);
    v = _mm256_blendv_epi8(v, w, b5);
  }
  return _mm256_add_epi8(v, _mm256_and_si256(extra, _mm256_set1_epi8(static_cast<char>(sp.shift))));
}

// Both level vectors of k-group g of sub-block s, rows 8h..: columns 32s+4g.. (lo), 32s+16+4g.. (hi).
template <GgmlType kType>
inline void levels_of(const uint8_t* blk, int s, int g, int h, const Tables<kType>& t, const SubBlockHalf& sb,
                      __m256i& lo, __m256i& hi) {
  constexpr IqkPackedSpec sp = iqk_packed_spec(kType);
  const __m256i low = _mm256_set1_epi8(0x0F);
  const __m256i raw = half(blk + sp.quants_offset() + 256 * s + 64 * g, h);
  const uint8_t* high = blk + sp.bits_offset() + 64 * sp.high_bits * s;
  __m256i b4_lo = raw, b4_hi = raw, b5_lo = raw, b5_hi = raw;  // unused below IQ5 / IQ6
  if constexpr (sp.high_bits == 1) {
    const __m256i bits = half(high, h);
    b4_lo = bit_set(bits, g);
    b4_hi = bit_set(bits, 4 + g);
  }
  if constexpr (sp.high_bits == 2) {
    const __m256i bits_lo = half(high, h), bits_hi = half(high + 64, h);
    b4_lo = bit_set(bits_lo, 2 * g);
    b5_lo = bit_set(bits_lo, 2 * g + 1);
    b4_hi = bit_set(bits_hi, 2 * g);
    b5_hi = bit_set(bits_hi, 2 * g + 1);
  }
  lo = levels<kType>(_mm256_and_si256(raw, low), b4_lo, b5_lo, sb.extra_lo, t);
  hi = levels<kType>(_mm256_and_si256(_mm256_srli_epi16(raw, 4), low), b4_hi, b5_hi, sb.extra_hi, t);
}

// Signed level x a through vpmaddubsw (|a| unsigned, level with a's sign): int16 pairs.
inline __m256i signed_pairs(__m256i level, __m256i a) {
  return _mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(level, a));
}

template <GgmlType kType, int NT>
void gemm(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, float* out) {
  constexpr IqkPackedSpec sp = iqk_packed_spec(kType);
  constexpr int64_t kBytes = sp.bytes();
  constexpr int kLines = static_cast<int>(kBytes / 64 / 8);  // per sub-block
  const int64_t nb = n_cols / kQK_K;
  const BlockQ8_K* a[NT];
  for (int t = 0; t < NT; ++t) a[t] = reinterpret_cast<const BlockQ8_K*>(act + t * act_stride);
  const Tables<kType> tables;
  __m256 acc[2][NT];
  zero_halves(acc);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + sp.header_bytes() + b * kBytes;
    for (int h = 0; h < 2; ++h) {
      __m256i tot[NT];
      for (int t = 0; t < NT; ++t) tot[t] = _mm256_setzero_si256();
      for (int s = 0; s < 8; ++s) {
        if (h == 0)
          for (int l = 0; l < kLines; ++l)
            _mm_prefetch(reinterpret_cast<const char*>(blk + kBytes + 64 * (kLines * s + l)), _MM_HINT_T0);
        const SubBlockHalf sb = sub_block<kType>(blk, s, h);
        for (int g = 0; g < 4; ++g) {
          __m256i lo, hi;
          levels_of<kType>(blk, s, g, h, tables, sb, lo, hi);
          for (int t = 0; t < NT; ++t) {
            const __m256i plo = signed_pairs(lo, bcast4(a[t][b].qs + 32 * s + 4 * g));
            const __m256i phi = signed_pairs(hi, bcast4(a[t][b].qs + 32 * s + 16 + 4 * g));
            tot[t] = _mm256_add_epi32(tot[t], _mm256_madd_epi16(plo, sb.scale_lo));
            tot[t] = _mm256_add_epi32(tot[t], _mm256_madd_epi16(phi, sb.scale_hi));
          }
        }
      }
      __m256 dw;
      if constexpr (sp.row_scaled())
        dw = _mm256_loadu_ps(reinterpret_cast<const float*>(group) + 8 * h);
      else
        dw = f16x8(blk + 16 * h);
      add_scaled_sums<NT>(dw, a, b, tot, acc[h]);
    }
  }
  store_halves(acc, out);
}

inline __m256i table16(const int8_t* p) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// The 2- and 3-bit types: group j's rows 8h.. whose extra bit is set (lane masks) and their
// scales as int16 pairs.
template <GgmlType kType>
inline void low_group(const uint8_t* blk, int j, int h, __m256i& extra, __m256i& scale) {
  constexpr IqkLowSpec sp = iqk_low_spec(kType);
  const uint8_t* sc = blk + sp.scale_offset() + 16 * j + 8 * h;
  if constexpr (sp.row_scaled()) {
    const __m256i one = _mm256_set1_epi32(1);
    const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc));
    extra = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_cvtepu8_epi32(v), one), one);
    scale = _mm256_srai_epi16(i8_pairs(sc), 1);
  } else {
    uint16_t bits;
    std::memcpy(&bits, blk + sp.extra_offset() + 2 * j, 2);
    extra = row_mask(bits, h);
    scale = i8_pairs(sc);
  }
}

// IQ2_K, IQ3_K, IQ2_KS, IQ3_KS: signed levels by vpshufb from the 2 index bits at 2q (IQ3: the
// third bit moved to bit 2), the extra rows' shift added bytewise; |level| <= 63.
template <GgmlType kType, int NT>
void gemm_low(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, float* out) {
  constexpr IqkLowSpec sp = iqk_low_spec(kType);
  constexpr int64_t kBytes = sp.bytes();
  constexpr int kEntries = 64 / sp.n_groups;
  constexpr int kLines = static_cast<int>(kBytes / 64 / sp.n_groups);
  const int64_t nb = n_cols / kQK_K;
  const BlockQ8_K* a[NT];
  for (int t = 0; t < NT; ++t) a[t] = reinterpret_cast<const BlockQ8_K*>(act + t * act_stride);
  alignas(16) int8_t levels16[16] = {};
  for (int i = 0; i < (sp.third_bit ? 8 : 4); ++i) levels16[i] = sp.table[i];
  const __m256i tbl = table16(levels16);
  const __m256i three = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
  const __m256i shift = _mm256_set1_epi8(static_cast<char>(sp.shift));
  __m256 acc[2][NT];
  zero_halves(acc);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + sp.header_bytes() + b * kBytes;
    for (int h = 0; h < 2; ++h) {
      __m256i tot[NT];
      for (int t = 0; t < NT; ++t) tot[t] = _mm256_setzero_si256();
      for (int j = 0; j < sp.n_groups; ++j) {
        if (h == 0)
          for (int l = 0; l < kLines; ++l)
            _mm_prefetch(reinterpret_cast<const char*>(blk + kBytes + 64 * (kLines * j + l)), _MM_HINT_T0);
        __m256i extra, scale;
        low_group<kType>(blk, j, h, extra, scale);
        const __m256i add = _mm256_and_si256(extra, shift);
        const int q = j / (sp.n_groups / 4), p0 = kEntries * (j % (sp.n_groups / 4));
        for (int p = p0; p < p0 + kEntries; ++p) {
          __m256i idx = _mm256_and_si256(_mm256_srli_epi16(half(blk + sp.quants_offset() + 64 * p, h), 2 * q), three);
          if constexpr (sp.third_bit) {
            const __m256i hb = half(blk + sp.bits_offset() + 64 * (p % 8), h);
            const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << (2 * q + p / 8)));
            idx = _mm256_or_si256(idx, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, bit), bit), four));
          }
          const __m256i level = _mm256_add_epi8(_mm256_shuffle_epi8(tbl, idx), add);
          for (int t = 0; t < NT; ++t) {
            const __m256i pr = signed_pairs(level, bcast4(a[t][b].qs + 64 * q + 4 * p));
            tot[t] = _mm256_add_epi32(tot[t], _mm256_madd_epi16(pr, scale));
          }
        }
      }
      __m256 dw;
      if constexpr (sp.row_scaled())
        dw = f16x8(group + 16 * h);
      else
        dw = f16x8(blk + 16 * h);
      add_scaled_sums<NT>(dw, a, b, tot, acc[h]);
    }
  }
  store_halves(acc, out);
}

// IQ2_KL's pair levels split by element: kIQ2KLFirst[i] and kIQ2KLSecond[i] of pair i.
constexpr auto kIQ2KLFirst = [] {
  std::array<int8_t, 32> t{};
  for (int i = 0; i < 32; ++i) t[i] = static_cast<int8_t>(kIQ2KLPairs[i] & 0xff);
  return t;
}();
constexpr auto kIQ2KLSecond = [] {
  std::array<int8_t, 32> t{};
  for (int i = 0; i < 32; ++i) t[i] = static_cast<int8_t>(kIQ2KLPairs[i] >> 8);
  return t;
}();

// IQ2_KL: the 5-bit pair index of each word copied to both its bytes, then the even bytes take
// the pair's first level and the odd bytes its second, each from a 32-entry table by two vpshufb.
template <int NT>
void gemm_iq2_kl(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, float* out) {
  constexpr int kLines = static_cast<int>(kIQ2KLx16Bytes / 64 / 8);  // per sub-block
  const int64_t nb = n_cols / kQK_K;
  const BlockQ8_K* a[NT];
  for (int t = 0; t < NT; ++t) a[t] = reinterpret_cast<const BlockQ8_K*>(act + t * act_stride);
  const __m256i first0 = table16(kIQ2KLFirst.data()), first1 = table16(kIQ2KLFirst.data() + 16);
  const __m256i second0 = table16(kIQ2KLSecond.data()), second1 = table16(kIQ2KLSecond.data() + 16);
  const __m256i low = _mm256_set1_epi16(0x0F), five = _mm256_set1_epi16(0x10);
  const __m256i nib = _mm256_set1_epi8(0x0F), five8 = _mm256_set1_epi8(0x10);
  const __m256i odd = _mm256_set1_epi16(static_cast<int16_t>(0xFF00));
  __m256 acc[2][NT];
  zero_halves(acc);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + kIQ2KLx16Head + b * kIQ2KLx16Bytes;
    for (int h2 = 0; h2 < 2; ++h2) {
      __m256i tot[NT];
      for (int t = 0; t < NT; ++t) tot[t] = _mm256_setzero_si256();
      for (int s = 0; s < 8; ++s) {
        if (h2 == 0)
          for (int l = 0; l < kLines; ++l)
            _mm_prefetch(reinterpret_cast<const char*>(blk + kIQ2KLx16Bytes + 64 * (kLines * s + l)), _MM_HINT_T0);
        const __m256i scale = i8_pairs(blk + 16 * s + 8 * h2);
        const __m256i fifth = half(blk + kIQ2KLx16Fifth + 64 * (s / 2), h2);
        for (int h = 0; h < 2; ++h) {
          const __m256i raw = half(blk + kIQ2KLx16Nibbles + 64 * (2 * s + h), h2);
          for (int k = 0; k < 4; ++k) {
            const __m256i bit = _mm256_set1_epi16(static_cast<int16_t>(1u << (8 * (s % 2) + 4 * h + k)));
            __m256i idx = _mm256_and_si256(_mm256_srli_epi16(raw, 4 * k), low);
            idx = _mm256_or_si256(idx, _mm256_and_si256(_mm256_cmpeq_epi16(_mm256_and_si256(fifth, bit), bit), five));
            idx = _mm256_or_si256(idx, _mm256_slli_epi16(idx, 8));
            const __m256i lo = _mm256_and_si256(idx, nib);
            const __m256i upper = _mm256_cmpeq_epi8(_mm256_and_si256(idx, five8), five8);
            const __m256i first =
                _mm256_blendv_epi8(_mm256_shuffle_epi8(first0, lo), _mm256_shuffle_epi8(first1, lo), upper);
            const __m256i second =
                _mm256_blendv_epi8(_mm256_shuffle_epi8(second0, lo), _mm256_shuffle_epi8(second1, lo), upper);
            const __m256i level = _mm256_blendv_epi8(first, second, odd);
            for (int t = 0; t < NT; ++t) {
              const __m256i p = signed_pairs(level, bcast4(a[t][b].qs + 32 * s + 16 * h + 4 * k));
              tot[t] = _mm256_add_epi32(tot[t], _mm256_madd_epi16(p, scale));
            }
          }
        }
      }
      const __m256 dw = f16x8(group + 16 * h2);
      add_scaled_sums<NT>(dw, a, b, tot, acc[h2]);
    }
  }
  store_halves(acc, out);
}

template <GgmlType kType>
struct IqkKernel {
  template <int NT>
  static void run(int64_t n, const uint8_t* g, const uint8_t* a, int64_t s, float* o) {
    if constexpr (kType == GgmlType::IQ2_KL)
      gemm_iq2_kl<NT>(n, g, a, s, o);
    else if constexpr (iqk_low_spec(kType).n_groups != 0)
      gemm_low<kType, NT>(n, g, a, s, o);
    else
      gemm<kType, NT>(n, g, a, s, o);
  }
};

}  // namespace

PackedGemmFn packed_gemm_iqk_avx2_fn(GgmlType t) {
  switch (t) {
    case GgmlType::IQ4_K:
      return by_count<InFours<IqkKernel<GgmlType::IQ4_K>>>;
    case GgmlType::IQ5_K:
      return by_count<InFours<IqkKernel<GgmlType::IQ5_K>>>;
    case GgmlType::IQ6_K:
      return by_count<InFours<IqkKernel<GgmlType::IQ6_K>>>;
    case GgmlType::IQ4_KS:
      return by_count<InFours<IqkKernel<GgmlType::IQ4_KS>>>;
    case GgmlType::IQ5_KS:
      return by_count<InFours<IqkKernel<GgmlType::IQ5_KS>>>;
    case GgmlType::IQ4_KSS:
      return by_count<InFours<IqkKernel<GgmlType::IQ4_KS>>>;  // packed as IQ4_KS
    case GgmlType::IQ2_KL:
      return by_count<InFours<IqkKernel<GgmlType::IQ2_KL>>>;
    case GgmlType::IQ2_K:
      return by_count<InFours<IqkKernel<GgmlType::IQ2_K>>>;
    case GgmlType::IQ3_K:
      return by_count<InFours<IqkKernel<GgmlType::IQ3_K>>>;
    case GgmlType::IQ2_KS:
      return by_count<InFours<IqkKernel<GgmlType::IQ2_KS>>>;
    case GgmlType::IQ3_KS:
      return by_count<InFours<IqkKernel<GgmlType::IQ3_KS>>>;
    default:
      return nullptr;
  }
}

}  // namespace mla::quant
