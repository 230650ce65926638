// AVX-512 VNNI GEMM over the packed groups of ik_llama.cpp's table k-quants (layouts in
// packed_iqk.h). IQ4_K, IQ5_K, IQ6_K, IQ4_KS, IQ5_KS (and IQ4_KSS, packed as IQ4_KS): one 64-byte
// load holds the 4-bit indices of 4 columns of each of the 16 rows twice (low nibbles: columns
// 4g.. of a 32-column sub-block, high: 16+4g..); vpshufb maps them to level + 128 (IQ5, IQ6: two or
// four 16-entry tables, the index bits above the nibble choosing per byte), and a masked add of the
// table shift to a row's 4 bytes applies its group's extra bit. IQ2_K, IQ3_K, IQ2_KS, IQ3_KS and
// IQ2_KL below. Each group's int32 sum starts from -128 x its activation sum, so it ends as the
// exact sum of level x a. The float steps per (row, token) are the scalar twin's, in its order
// (packed_iqk.cpp), so results are bit-identical to it whatever the number of tokens in the call.
#include <immintrin.h>
// GCC 12 flags the deliberately undefined pass-through operand of its own AVX-512 intrinsics.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <array>
#include <cstring>

#include "quant/kernels.h"
#include "quant/packed_avx512.h"
#include "quant/packed_iqk.h"

namespace mla::quant {
namespace {

// level + 128 of table entries 16h..16h+15, made once at compile time.
template <GgmlType kType, int kHalf>
struct ShiftedTable {
  static constexpr auto bytes = [] {
    std::array<uint8_t, 16> t{};
    for (int i = 0; i < 16; ++i) t[i] = static_cast<uint8_t>(iqk_packed_spec(kType).table[16 * kHalf + i] + 128);
    return t;
  }();
};

template <GgmlType kType, int kHalf>
inline __m512i shifted_table() {
  return _mm512_broadcast_i32x4(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(ShiftedTable<kType, kHalf>::bytes.data())));
}

// One sub-block's per-row group data: the extra masks and int32 scales of its low and high 16
// columns (the same group for the 8-group types).
struct SubBlock {
  __mmask16 extra_lo, extra_hi;
  __m512i scale_lo, scale_hi;
};

template <GgmlType kType>
inline SubBlock sub_block(const uint8_t* blk, int s) {
  constexpr IqkPackedSpec sp = iqk_packed_spec(kType);
  SubBlock sb;
  if constexpr (sp.row_scaled()) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + sp.scale_offset() + 16 * s));
    sb.extra_lo = sb.extra_hi = _mm_test_epi8_mask(v, _mm_set1_epi8(1));
    const __m512i raw = _mm512_cvtepu8_epi32(v);
    sb.scale_lo = sb.scale_hi = _mm512_sub_epi32(_mm512_and_si512(raw, _mm512_set1_epi32(254)), _mm512_set1_epi32(127));
  } else {
    uint16_t lo, hi;
    std::memcpy(&lo, blk + sp.extra_offset() + 4 * s, 2);
    std::memcpy(&hi, blk + sp.extra_offset() + 4 * s + 2, 2);
    sb.extra_lo = lo;
    sb.extra_hi = hi;
    sb.scale_lo = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 32 + 32 * s)));
    sb.scale_hi = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 48 + 32 * s)));
  }
  return sb;
}

// The table quarters kType uses, level + 128 in every 128-bit lane.
template <GgmlType kType>
struct Tables {
  __m512i q[4];
  Tables() {
    q[0] = q[1] = q[2] = q[3] = shifted_table<kType, 0>();
    if constexpr (iqk_packed_spec(kType).high_bits >= 1) q[1] = shifted_table<kType, 1>();
    if constexpr (iqk_packed_spec(kType).high_bits == 2) {
      q[2] = shifted_table<kType, 2>();
      q[3] = shifted_table<kType, 3>();
    }
  }
};

// The unsigned operand of 16 rows x 4 columns: idx the 4 low index bits, b4 / b5 the bytes whose
// index bit 4 / 5 is set (IQ5, IQ6), extra the rows whose group takes the shifted table.
template <GgmlType kType>
inline __m512i operand(__m512i idx, __mmask64 b4, __mmask64 b5, __mmask16 extra, const Tables<kType>& t) {
  constexpr IqkPackedSpec sp = iqk_packed_spec(kType);
  __m512i v = _mm512_shuffle_epi8(t.q[0], idx);
  if constexpr (sp.high_bits >= 1) v = _mm512_mask_shuffle_epi8(v, b4, t.q[1], idx);
  if constexpr (sp.high_bits == 2) {
    const __m512i w = _mm512_mask_shuffle_epi8(_mm512_shuffle_epi8(t.q[2], idx), b4, t.q[3], idx);
    v = _mm512_mask_mov_epi8(v, b5, w);
  }
  // Bytes stay <= 251, so the 32-bit add carries nothing across them.
  return _mm512_mask_add_epi32(v, extra, v, _mm512_set1_epi32(sp.shift * 0x01010101));
}

// The operand of k-group g of half h of sub-block s: columns 32s+16h+4g..+3 (the low nibbles
// for h = 0, the high for h = 1).
template <GgmlType kType, int kH>
inline __m512i half_operand(const uint8_t* blk, int s, int g, const Tables<kType>& t, __mmask16 extra) {
  constexpr IqkPackedSpec sp = iqk_packed_spec(kType);
  const __m512i low = _mm512_set1_epi8(0x0F);
  const __m512i raw = load512(blk + sp.quants_offset() + 256 * s + 64 * g);
  const uint8_t* high = blk + sp.bits_offset() + 64 * sp.high_bits * s;
  __mmask64 b4 = 0, b5 = 0;
  if constexpr (sp.high_bits == 1)
    b4 = _mm512_test_epi8_mask(load512(high), _mm512_set1_epi8(static_cast<char>((kH ? 16 : 1) << g)));
  if constexpr (sp.high_bits == 2) {
    const __m512i bits = load512(high + 64 * kH);
    b4 = _mm512_test_epi8_mask(bits, _mm512_set1_epi8(static_cast<char>(1 << 2 * g)));
    b5 = _mm512_test_epi8_mask(bits, _mm512_set1_epi8(static_cast<char>(2 << 2 * g)));
  }
  const __m512i idx = kH ? _mm512_and_si512(_mm512_srli_epi16(raw, 4), low) : _mm512_and_si512(raw, low);
  return operand<kType>(idx, b4, b5, extra, t);
}

// Half h of sub-block s for NT tokens: sum[t] += the half's 16 columns of level + 128 times the
// activations (vpdpbusd), 4 columns per operand.
template <GgmlType kType, int kH, int NT>
inline void half_sums(const uint8_t* blk, int s, const Tables<kType>& t, __mmask16 extra, const int8_t* const* qa,
                      __m512i* sum) {
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    const __m512i v = half_operand<kType, kH>(blk, s, g, t, extra);
    for (int k = 0; k < NT; ++k) sum[k] = _mm512_dpbusd_epi32(sum[k], v, bcast32(qa[k] + 32 * s + 16 * kH + 4 * g));
  }
}

// The tokens one call of gemm below takes: their half sums and running totals fill the 32
// registers with the tables and the operand (IQ6_K's four tables leave room for fewer).
template <GgmlType kType>
inline constexpr int kNibbleTokens = iqk_packed_spec(kType).high_bits == 2 ? 10 : 12;

// -128 x each row's scale of groups 2k and 2k + 1 (the 8-group types: of group k, twice), as the
// int16 pairs vpdpwssd multiplies with Q8_K's bsums pair k: the offset of level + 128, removed
// once per super-block.
template <GgmlType kType>
inline __m512i neg128_scale_pairs(const uint8_t* blk, int k) {
  constexpr IqkPackedSpec sp = iqk_packed_spec(kType);
  __m256i pairs;
  if constexpr (sp.row_scaled()) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + sp.scale_offset() + 16 * k));
    const __m128i sc = _mm_sub_epi8(_mm_and_si128(v, _mm_set1_epi8(static_cast<char>(254))), _mm_set1_epi8(127));
    pairs = _mm256_set_m128i(_mm_unpackhi_epi8(sc, sc), _mm_unpacklo_epi8(sc, sc));
  } else {
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 32 + 32 * k));
    const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 48 + 32 * k));
    pairs = _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
  }
  return _mm512_sub_epi16(_mm512_setzero_si512(), _mm512_slli_epi16(_mm512_cvtepi8_epi16(pairs), 7));
}

// Up to kNibbleTokens tokens share each decoded operand. Per half sub-block (one scale group of
// the 16-group types) each token's int32 sum of (level + 128) x a starts at zero in a register
// and is scaled into its running total tot[t] (vpmulld), also in a register; the offset's share,
// -128 x scale x the activation sums, enters tot once per super-block (vpdpwssd). The totals are
// the twin's exact integers, the float steps its own.
template <GgmlType kType, int NT>
void gemm(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, float* out) {
  constexpr IqkPackedSpec sp = iqk_packed_spec(kType);
  constexpr int64_t kBytes = sp.bytes();
  constexpr int kLines = static_cast<int>(kBytes / 64 / 8);  // per sub-block
  const int64_t nb = n_cols / kQK_K;
  const BlockQ8_K* a[NT];
  const int8_t* qa[NT];
  for (int t = 0; t < NT; ++t) a[t] = reinterpret_cast<const BlockQ8_K*>(act + t * act_stride);
  const Tables<kType> tables;
  __m512 dw = _mm512_setzero_ps();
  if constexpr (sp.row_scaled()) dw = _mm512_loadu_ps(group);
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(out + 16 * t, _mm512_setzero_ps());
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + sp.header_bytes() + b * kBytes;
    __m512i tot[NT];
    for (int t = 0; t < NT; ++t) {
      tot[t] = _mm512_setzero_si512();
      qa[t] = a[t][b].qs;
    }
    for (int k = 0; k < 8; ++k) {
      const __m512i sp16 = neg128_scale_pairs<kType>(blk, k);
      for (int t = 0; t < NT; ++t) tot[t] = _mm512_dpwssd_epi32(tot[t], sp16, bcast32(a[t][b].bsums + 2 * k));
    }
    for (int s = 0; s < 8; ++s) {
      for (int l = 0; l < kLines; ++l)
        _mm_prefetch(reinterpret_cast<const char*>(blk + kBytes + 64 * (kLines * s + l)), _MM_HINT_T0);
      const SubBlock sb = sub_block<kType>(blk, s);
      __m512i sum[NT];
      for (int t = 0; t < NT; ++t) sum[t] = _mm512_setzero_si512();
      half_sums<kType, 0, NT>(blk, s, tables, sb.extra_lo, qa, sum);
      if constexpr (!sp.row_scaled()) {
        for (int t = 0; t < NT; ++t) {
          tot[t] = _mm512_add_epi32(tot[t], _mm512_mullo_epi32(sum[t], sb.scale_lo));
          sum[t] = _mm512_setzero_si512();
        }
      }
      half_sums<kType, 1, NT>(blk, s, tables, sb.extra_hi, qa, sum);
      for (int t = 0; t < NT; ++t) tot[t] = _mm512_add_epi32(tot[t], _mm512_mullo_epi32(sum[t], sb.scale_hi));
    }
    if constexpr (!sp.row_scaled()) dw = load_f16x16(blk);
    for (int t = 0; t < NT; ++t) {
      const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(a[t][b].d));
      _mm512_storeu_ps(out + 16 * t, _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(tot[t]), _mm512_loadu_ps(out + 16 * t)));
    }
  }
}

// The 2- and 3-bit types: level + 128 of the 4 or 8 table entries, then zeros.
template <GgmlType kType>
struct LowTable {
  static constexpr auto bytes = [] {
    constexpr IqkLowSpec sp = iqk_low_spec(kType);
    std::array<uint8_t, 16> t{};
    for (int i = 0; i < (sp.third_bit ? 8 : 4); ++i) t[i] = static_cast<uint8_t>(sp.table[i] + 128);
    return t;
  }();
};

// Group j's rows whose extra bit is set, and their int32 scales.
template <GgmlType kType>
inline void low_group(const uint8_t* blk, int j, __mmask16& extra, __m512i& scale) {
  constexpr IqkLowSpec sp = iqk_low_spec(kType);
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + sp.scale_offset() + 16 * j));
  if constexpr (sp.row_scaled()) {
    extra = _mm_test_epi8_mask(v, _mm_set1_epi8(1));
    scale = _mm512_srai_epi32(_mm512_cvtepi8_epi32(v), 1);
  } else {
    uint16_t bits;
    std::memcpy(&bits, blk + sp.extra_offset() + 2 * j, 2);
    extra = bits;
    scale = _mm512_cvtepi8_epi32(v);
  }
}

// IQ2_K, IQ3_K, IQ2_KS, IQ3_KS: per group (16 or 32 columns) 4 or 8 entries, each operand the 2
// index bits at 2q of an entry (IQ3: the third bit from its plane added as 4), mapped by vpshufb.
template <GgmlType kType, int NT>
void gemm_low(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, float* out) {
  constexpr IqkLowSpec sp = iqk_low_spec(kType);
  constexpr int64_t kBytes = sp.bytes();
  constexpr int kEntries = 64 / sp.n_groups;  // entries (4 columns each) per group and quarter
  constexpr int kLines = static_cast<int>(kBytes / 64 / sp.n_groups);
  const int64_t nb = n_cols / kQK_K;
  const BlockQ8_K* a[NT];
  for (int t = 0; t < NT; ++t) a[t] = reinterpret_cast<const BlockQ8_K*>(act + t * act_stride);
  const __m512i tbl =
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(LowTable<kType>::bytes.data())));
  const __m512i three = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
  const __m512i shift = _mm512_set1_epi32(sp.shift * 0x01010101);
  __m512 dw = _mm512_setzero_ps();
  if constexpr (sp.row_scaled()) dw = load_f16x16(group);
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + sp.header_bytes() + b * kBytes;
    __m512i tot[NT];
    for (int t = 0; t < NT; ++t) tot[t] = _mm512_setzero_si512();
#pragma GCC unroll 16
    for (int j = 0; j < sp.n_groups; ++j) {
      for (int l = 0; l < kLines; ++l)
        _mm_prefetch(reinterpret_cast<const char*>(blk + kBytes + 64 * (kLines * j + l)), _MM_HINT_T0);
      __mmask16 extra;
      __m512i scale;
      low_group<kType>(blk, j, extra, scale);
      const int q = j / (sp.n_groups / 4), p0 = kEntries * (j % (sp.n_groups / 4));
      __m512i is[NT];
      for (int t = 0; t < NT; ++t) {
        const int32_t sum = sp.row_scaled() ? a[t][b].bsums[2 * j] + a[t][b].bsums[2 * j + 1] : a[t][b].bsums[j];
        is[t] = _mm512_set1_epi32(-128 * sum);
      }
#pragma GCC unroll 8
      for (int p = p0; p < p0 + kEntries; ++p) {
        const __m512i raw = load512(blk + sp.quants_offset() + 64 * p);
        __m512i idx = _mm512_and_si512(q == 0 ? raw : _mm512_srli_epi16(raw, 2 * q), three);
        if constexpr (sp.third_bit) {
          const __m512i hb = load512(blk + sp.bits_offset() + 64 * (p % 8));
          const __mmask64 k3 = _mm512_test_epi8_mask(hb, _mm512_set1_epi8(static_cast<char>(1 << (2 * q + p / 8))));
          idx = _mm512_mask_add_epi8(idx, k3, idx, four);
        }
        __m512i v = _mm512_shuffle_epi8(tbl, idx);
        v = _mm512_mask_add_epi32(v, extra, v, shift);  // bytes stay <= 183: no carries
        for (int t = 0; t < NT; ++t) is[t] = _mm512_dpbusd_epi32(is[t], v, bcast32(a[t][b].qs + 64 * q + 4 * p));
      }
      for (int t = 0; t < NT; ++t) tot[t] = _mm512_add_epi32(tot[t], _mm512_mullo_epi32(is[t], scale));
    }
    if constexpr (!sp.row_scaled()) dw = load_f16x16(blk);
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(a[t][b].d)), _mm512_cvtepi32_ps(tot[t]), acc[t]);
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(out + 16 * t, acc[t]);
}

// IQ2_KL's 32 level pairs + 128 per byte, one per 16-bit word: vpermw's table.
constexpr auto kIQ2KLShiftedPairs = [] {
  std::array<uint16_t, 32> t{};
  for (int i = 0; i < 32; ++i) t[i] = static_cast<uint16_t>(kIQ2KLPairs[i] ^ 0x8080);  // +128 per byte
  return t;
}();

// IQ2_KL: each operand is 32 words of 5-bit pair indices (nibble k of an entry, the fifth bit
// from its own plane) mapped by vpermw to two levels + 128.
template <int NT>
void gemm_iq2_kl(int64_t n_cols, const uint8_t* group, const uint8_t* act, int64_t act_stride, float* out) {
  constexpr int kLines = static_cast<int>(kIQ2KLx16Bytes / 64 / 8);  // per sub-block
  const int64_t nb = n_cols / kQK_K;
  const BlockQ8_K* a[NT];
  for (int t = 0; t < NT; ++t) a[t] = reinterpret_cast<const BlockQ8_K*>(act + t * act_stride);
  const __m512i tbl = _mm512_loadu_si512(kIQ2KLShiftedPairs.data());
  const __m512i low = _mm512_set1_epi16(0x0F), five = _mm512_set1_epi16(0x10);
  const __m512 dw = load_f16x16(group);
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + kIQ2KLx16Head + b * kIQ2KLx16Bytes;
    __m512i tot[NT];
    for (int t = 0; t < NT; ++t) tot[t] = _mm512_setzero_si512();
    for (int s = 0; s < 8; ++s) {
      for (int l = 0; l < kLines; ++l)
        _mm_prefetch(reinterpret_cast<const char*>(blk + kIQ2KLx16Bytes + 64 * (kLines * s + l)), _MM_HINT_T0);
      const __m512i scale = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * s)));
      const __m512i fifth = load512(blk + kIQ2KLx16Fifth + 64 * (s / 2));
      __m512i s0[NT], s1[NT];
      for (int t = 0; t < NT; ++t) {
        s0[t] = _mm512_set1_epi32(-128 * (a[t][b].bsums[2 * s] + a[t][b].bsums[2 * s + 1]));
        s1[t] = _mm512_setzero_si512();
      }
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m512i raw = load512(blk + kIQ2KLx16Nibbles + 64 * (2 * s + h));
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
          __m512i idx = _mm512_and_si512(k == 0 ? raw : _mm512_srli_epi16(raw, 4 * k), low);
          const int bit = 8 * (s % 2) + 4 * h + k;
          const __mmask32 f = _mm512_test_epi16_mask(fifth, _mm512_set1_epi16(static_cast<int16_t>(1u << bit)));
          idx = _mm512_mask_add_epi16(idx, f, idx, five);
          const __m512i w = _mm512_permutexvar_epi16(idx, tbl);
          for (int t = 0; t < NT; ++t) {
            const __m512i av = bcast32(a[t][b].qs + 32 * s + 16 * h + 4 * k);
            if (k % 2 == 0)
              s0[t] = _mm512_dpbusd_epi32(s0[t], w, av);
            else
              s1[t] = _mm512_dpbusd_epi32(s1[t], w, av);
          }
        }
      }
      for (int t = 0; t < NT; ++t)
        tot[t] = _mm512_add_epi32(tot[t], _mm512_mullo_epi32(_mm512_add_epi32(s0[t], s1[t]), scale));
    }
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(a[t][b].d)), _mm512_cvtepi32_ps(tot[t]), acc[t]);
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(out + 16 * t, acc[t]);
}

template <GgmlType kType>
struct IqkKernel {
  // Tokens per call: the nibble types' kernel takes kNibbleTokens, the others 8.
  static constexpr int kMax = iqk_packed_spec(kType).n_groups != 0 ? kNibbleTokens<kType> : 8;
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

PackedGemmFn packed_gemm_iqk_avx512_fn(GgmlType t) {
  switch (t) {
    case GgmlType::IQ4_K:
      return by_count<IqkKernel<GgmlType::IQ4_K>, IqkKernel<GgmlType::IQ4_K>::kMax>;
    case GgmlType::IQ5_K:
      return by_count<IqkKernel<GgmlType::IQ5_K>, IqkKernel<GgmlType::IQ5_K>::kMax>;
    case GgmlType::IQ6_K:
      return by_count<IqkKernel<GgmlType::IQ6_K>, IqkKernel<GgmlType::IQ6_K>::kMax>;
    case GgmlType::IQ4_KS:
      return by_count<IqkKernel<GgmlType::IQ4_KS>, IqkKernel<GgmlType::IQ4_KS>::kMax>;
    case GgmlType::IQ5_KS:
      return by_count<IqkKernel<GgmlType::IQ5_KS>, IqkKernel<GgmlType::IQ5_KS>::kMax>;
    case GgmlType::IQ4_KSS:
      return by_count<IqkKernel<GgmlType::IQ4_KS>, IqkKernel<GgmlType::IQ4_KS>::kMax>;  // packed as IQ4_KS
    case GgmlType::IQ2_KL:
      return by_count<IqkKernel<GgmlType::IQ2_KL>, IqkKernel<GgmlType::IQ2_KL>::kMax>;
    case GgmlType::IQ2_K:
      return by_count<IqkKernel<GgmlType::IQ2_K>, IqkKernel<GgmlType::IQ2_K>::kMax>;
    case GgmlType::IQ3_K:
      return by_count<IqkKernel<GgmlType::IQ3_K>, IqkKernel<GgmlType::IQ3_K>::kMax>;
    case GgmlType::IQ2_KS:
      return by_count<IqkKernel<GgmlType::IQ2_KS>, IqkKernel<GgmlType::IQ2_KS>::kMax>;
    case GgmlType::IQ3_KS:
      return by_count<IqkKernel<GgmlType::IQ3_KS>, IqkKernel<GgmlType::IQ3_KS>::kMax>;
    default:
      return nullptr;
  }
}

}  // namespace mla::quant
