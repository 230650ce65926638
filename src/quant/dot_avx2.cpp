// AVX2+FMA dot products (weight row · quantized activation row). Each has a scalar twin in
// dot_ref.cpp; tests/quant/dot_test.cpp states the tolerance between them. Integer products
// are exact; the only differences from the reference are float rounding of per-block scales
// and the accumulation order.
//
// Preconditions (as produced by quantize_row): Q8_0 / Q8_K activation quants lie in
// [-127, 127] and Q8_K bsums are the 16-element sums of qs.
#include <cstring>

#include "quant/iqk_kernels.h"
#include "quant/kernels.h"
#include "quant/simd_avx2.h"
#include "util/ggml_blocks.h"

namespace mla::quant {
namespace {

using namespace avx2;

// ---- float formats ------------------------------------------------------------------------

float dot_f32(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const float*>(w);
  const auto* y = static_cast<const float*>(a);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k)
      acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * k), _mm256_loadu_ps(y + i + 8 * k), acc[k]);
  for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc[0]);
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) sum += x[i] * y[i];
  return sum;
}

inline __m256 load_f16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256 load_bf16x8(const uint16_t* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

template <__m256 (*Load)(const uint16_t*), float (*Scalar)(uint16_t)>
float dot_half(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k) acc[k] = _mm256_fmadd_ps(Load(x + i + 8 * k), Load(y + i + 8 * k), acc[k]);
  for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(Load(x + i), Load(y + i), acc[0]);
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) sum += Scalar(x[i]) * Scalar(y[i]);
  return sum;
}

// ---- 32-element blocks · Q8_0 -----------------------------------------------------------------

inline __m256i load_i8x32(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// Two independent accumulators over pairs of blocks hide the FMA latency. Levels(block) gives
// the 32 signed weight levels; Scale(block) the weight scale. NT activation rows (a_stride bytes
// apart) share each weight block's loads and scale; every output is computed by exactly the
// instructions the NT = 1 case uses for it, so the results are bit-identical whatever NT.
template <int NT, typename Block, typename Levels, typename Scale>
void dot_blocks_q8_0(int64_t n, const Block* x, const uint8_t* a, int64_t a_stride, Levels levels, Scale scale,
                     float* out) {
  const int64_t nb = n / kQK;
  const BlockQ8_0* y[NT];
  for (int t = 0; t < NT; ++t) y[t] = reinterpret_cast<const BlockQ8_0*>(a + t * a_stride);
  __m256 acc0[NT], acc1[NT];
  for (int t = 0; t < NT; ++t) acc0[t] = acc1[t] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    const __m256i l0 = levels(x[i]), l1 = levels(x[i + 1]);
    const float d0 = scale(x[i]), d1 = scale(x[i + 1]);
    for (int t = 0; t < NT; ++t) {
      const __m256i s0 = dot_i8_quads(l0, load_i8x32(y[t][i].qs));
      const __m256i s1 = dot_i8_quads(l1, load_i8x32(y[t][i + 1].qs));
      acc0[t] = _mm256_fmadd_ps(_mm256_set1_ps(d0 * half_to_float(y[t][i].d)), _mm256_cvtepi32_ps(s0), acc0[t]);
      acc1[t] = _mm256_fmadd_ps(_mm256_set1_ps(d1 * half_to_float(y[t][i + 1].d)), _mm256_cvtepi32_ps(s1), acc1[t]);
    }
  }
  if (i < nb) {
    const __m256i l0 = levels(x[i]);
    const float d0 = scale(x[i]);
    for (int t = 0; t < NT; ++t) {
      const __m256i s0 = dot_i8_quads(l0, load_i8x32(y[t][i].qs));
      acc0[t] = _mm256_fmadd_ps(_mm256_set1_ps(d0 * half_to_float(y[t][i].d)), _mm256_cvtepi32_ps(s0), acc0[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = hsum(_mm256_add_ps(acc0[t], acc1[t]));
}

// Each 32-element weight format as one kernel body, instantiated for 1 and 4 activation rows.
template <int NT>
void dot_q8_0_rows(int64_t n, const void* w, const void* a, int64_t a_stride, float* out) {
  dot_blocks_q8_0<NT>(
      n, static_cast<const BlockQ8_0*>(w), static_cast<const uint8_t*>(a), a_stride,
      [](const BlockQ8_0& b) { return load_i8x32(b.qs); }, [](const BlockQ8_0& b) { return half_to_float(b.d); }, out);
}

template <int NT>
void dot_q4_0_rows(int64_t n, const void* w, const void* a, int64_t a_stride, float* out) {
  const __m256i eight = _mm256_set1_epi8(8);
  dot_blocks_q8_0<NT>(
      n, static_cast<const BlockQ4_0*>(w), static_cast<const uint8_t*>(a), a_stride,
      [eight](const BlockQ4_0& b) { return _mm256_sub_epi8(unpack_nibbles_32(b.qs), eight); },
      [](const BlockQ4_0& b) { return half_to_float(b.d); }, out);
}

// The one-row VecDotFn of a `*_rows<1>` kernel body.
template <void (*Rows)(int64_t, const void*, const void*, int64_t, float*)>
float one_row(int64_t n, const void* w, const void* a) {
  float out;
  Rows(n, w, a, 0, &out);
  return out;
}

// A 16-entry int8 table in both lanes, indexed by nibbles with pshufb.
inline __m256i table16(const int8_t* values) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(values)));
}

template <int NT>
void dot_iq4_nl_rows(int64_t n, const void* w, const void* a, int64_t a_stride, float* out) {
  const __m256i table = table16(kIQ4NLValues);
  dot_blocks_q8_0<NT>(
      n, static_cast<const BlockIQ4_NL*>(w), static_cast<const uint8_t*>(a), a_stride,
      [table](const BlockIQ4_NL& b) { return _mm256_shuffle_epi8(table, unpack_nibbles_32(b.qs)); },
      [](const BlockIQ4_NL& b) { return half_to_float(b.d); }, out);
}

// NVFP4: each 32-element half of a block is one Q8_0 block and two 16-element sub-blocks, each
// with its own scale (quad sums 0-3 and 4-7 of the half).
template <int NT>
void dot_nvfp4_rows(int64_t n, const void* w, const void* a, int64_t a_stride, float* out) {
  const __m256i table = table16(kMXFP4Values);
  const __m128i m4 = _mm_set1_epi8(0x0F);
  const auto* x = static_cast<const BlockNVFP4*>(w);
  const BlockQ8_0* y[NT];
  for (int t = 0; t < NT; ++t) y[t] = reinterpret_cast<const BlockQ8_0*>(static_cast<const uint8_t*>(a) + t * a_stride);
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / 64; ++i) {
    for (int h = 0; h < 2; ++h) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].qs + 16 * h));
      const __m128i lo = _mm_and_si128(q, m4), hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
      // Sub-block 2h: low nibbles of bytes 0-7 then their high nibbles; sub-block 2h+1: bytes 8-15.
      const __m256i idx = _mm256_set_m128i(_mm_unpackhi_epi64(lo, hi), _mm_unpacklo_epi64(lo, hi));
      const __m256i levels = _mm256_shuffle_epi8(table, idx);
      const float d0 = ue4m3_to_fp32_half(x[i].d[2 * h]), d1 = ue4m3_to_fp32_half(x[i].d[2 * h + 1]);
      const __m256 scales = _mm256_setr_ps(d0, d0, d0, d0, d1, d1, d1, d1);
      for (int t = 0; t < NT; ++t) {
        const BlockQ8_0& yb = y[t][2 * i + h];
        const __m256i s = dot_i8_quads(levels, load_i8x32(yb.qs));
        acc[t] =
            _mm256_fmadd_ps(_mm256_mul_ps(scales, _mm256_set1_ps(half_to_float(yb.d))), _mm256_cvtepi32_ps(s), acc[t]);
      }
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]);
}

template <int NT>
void dot_mxfp4_rows(int64_t n, const void* w, const void* a, int64_t a_stride, float* out) {
  const __m256i table = table16(kMXFP4Values);
  dot_blocks_q8_0<NT>(
      n, static_cast<const BlockMXFP4*>(w), static_cast<const uint8_t*>(a), a_stride,
      [table](const BlockMXFP4& b) { return _mm256_shuffle_epi8(table, unpack_nibbles_32(b.qs)); },
      [](const BlockMXFP4& b) { return e8m0_to_fp32_half(b.e); }, out);
}

// ---- K-quants · Q8_K ------------------------------------------------------------------------

// The 8 six-bit scales and mins of Q4_K/Q5_K as 8 bytes each, from the 12 packed bytes (same
// layout as unpack_k4_scales, done on 32-bit words).
inline void unpack_k4_scales_words(const uint8_t* packed, uint64_t* scales, uint64_t* mins) {
  uint32_t w[3];
  std::memcpy(w, packed, 12);
  const uint32_t sc_lo = w[0] & 0x3F3F3F3F;
  const uint32_t mn_lo = w[1] & 0x3F3F3F3F;
  const uint32_t sc_hi = (w[2] & 0x0F0F0F0F) | (((w[0] >> 6) & 0x03030303) << 4);
  const uint32_t mn_hi = ((w[2] >> 4) & 0x0F0F0F0F) | (((w[1] >> 6) & 0x03030303) << 4);
  *scales = sc_lo | (static_cast<uint64_t>(sc_hi) << 32);
  *mins = mn_lo | (static_cast<uint64_t>(mn_hi) << 32);
}

// Sum over the 8 sub-blocks of min[s] * (sum of the 32 activations of s), from the bsums.
inline __m128i mins_dot_bsums(uint64_t mins, const int16_t* bsums) {
  const __m128i mins16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(mins)));
  const __m128i b0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bsums));
  const __m128i b1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bsums + 8));
  return _mm_madd_epi16(mins16, _mm_hadd_epi16(b0, b1));  // 4 int32
}

// Shared body of Q4_K and Q5_K: HighBits(chunk, &lo, &hi) adds the 5th bit (or nothing). NT
// activation rows (a_stride bytes apart) share each super-block's unpacked levels and scales.
// Per row the float operations are exactly those of NT = 1 (the integer sums are exact in any
// order), so every row's result is bit-identical whatever NT.
template <int NT, typename Block, typename HighBits>
void dot_k4_like(int64_t n, const Block* x, const uint8_t* a, int64_t a_stride, HighBits high_bits, float* out) {
  const BlockQ8_K* y[NT];
  for (int t = 0; t < NT; ++t) y[t] = reinterpret_cast<const BlockQ8_K*>(a + t * a_stride);
  const __m256i low_mask = _mm256_set1_epi8(0x0F);
  __m256 acc[NT];
  __m128 acc_m[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps(), acc_m[t] = _mm_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float dw = half_to_float(x[i].d), dminw = half_to_float(x[i].dmin);
    uint64_t scales, mins;
    unpack_k4_scales_words(x[i].scales, &scales, &mins);
    for (int t = 0; t < NT; ++t)
      acc_m[t] =
          _mm_fmadd_ps(_mm_set1_ps(-y[t][i].d * dminw), _mm_cvtepi32_ps(mins_dot_bsums(mins, y[t][i].bsums)), acc_m[t]);

    const __m256i scales16 =
        _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(scales))));
    auto state = high_bits.begin(x[i]);
    __m256i sum[NT];
    for (int t = 0; t < NT; ++t) sum[t] = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {  // 64 elements: sub-blocks 2c (low nibbles) and 2c+1 (high)
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs + 32 * c));
      __m256i lo = _mm256_and_si256(q, low_mask);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low_mask);
      high_bits.add(state, &lo, &hi);
      const __m256i sc_lo = broadcast_i16(scales16, 2 * c), sc_hi = broadcast_i16(scales16, 2 * c + 1);
      for (int t = 0; t < NT; ++t) {
        const __m256i p_lo = _mm256_maddubs_epi16(lo, load_i8x32(y[t][i].qs + 64 * c));
        const __m256i p_hi = _mm256_maddubs_epi16(hi, load_i8x32(y[t][i].qs + 64 * c + 32));
        sum[t] = _mm256_add_epi32(sum[t], _mm256_madd_epi16(p_lo, sc_lo));
        sum[t] = _mm256_add_epi32(sum[t], _mm256_madd_epi16(p_hi, sc_hi));
      }
    }
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y[t][i].d * dw), _mm256_cvtepi32_ps(sum[t]), acc[t]);
  }
  for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]) + hsum(acc_m[t]);
}

struct NoHighBits {
  int begin(const BlockQ4_K&) const { return 0; }
  void add(int, __m256i*, __m256i*) const {}
};

// Q5_K: bit s of qh[l] is the 5th bit of element 32*s + l; consume two bits per chunk.
struct Q5HighBits {
  __m256i begin(const BlockQ5_K& b) const { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh)); }
  void add(__m256i& bits, __m256i* lo, __m256i* hi) const {
    const __m256i one = _mm256_set1_epi8(1);
    *lo = _mm256_or_si256(*lo, _mm256_slli_epi16(_mm256_and_si256(bits, one), 4));
    *hi = _mm256_or_si256(*hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bits, 1), one), 4));
    bits = _mm256_srli_epi16(bits, 2);
  }
};

template <int NT>
void dot_q4_k_rows(int64_t n, const void* w, const void* a, int64_t a_stride, float* out) {
  dot_k4_like<NT>(n, static_cast<const BlockQ4_K*>(w), static_cast<const uint8_t*>(a), a_stride, NoHighBits{}, out);
}
template <int NT>
void dot_q5_k_rows(int64_t n, const void* w, const void* a, int64_t a_stride, float* out) {
  dot_k4_like<NT>(n, static_cast<const BlockQ5_K*>(w), static_cast<const uint8_t*>(a), a_stride, Q5HighBits{}, out);
}
// Q6_K: levels are stored as u6 = q + 32, so sum(sc * q * a) = sum(sc * u6 * a) - 32 * sum(sc * bsum).
// NT activation rows share each super-block's unpacked levels (bit-identical per row, as above).
template <int NT>
void dot_q6_k_rows(int64_t n, const void* w, const void* a, int64_t a_stride, float* out) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const BlockQ8_K* y[NT];
  for (int t = 0; t < NT; ++t) y[t] = reinterpret_cast<const BlockQ8_K*>(static_cast<const uint8_t*>(a) + t * a_stride);
  // pshufb controls that put int16 scale 2k (low lane) and 2k+1 (high lane) in every slot.
  auto pair_ctrl = [](int k) {
    const auto lo = static_cast<int16_t>(((4 * k + 1) << 8) | (4 * k));
    const auto hi = static_cast<int16_t>(((4 * k + 3) << 8) | (4 * k + 2));
    return _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo));
  };
  const __m256i ctrl[4] = {pair_ctrl(0), pair_ctrl(1), pair_ctrl(2), pair_ctrl(3)};
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float dw = half_to_float(x[i].d);
    const __m256i scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales)));
    __m256i sum[NT], offset[NT];
    for (int t = 0; t < NT; ++t) {
      const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[t][i].bsums));
      offset[t] = _mm256_slli_epi32(_mm256_madd_epi16(scales16, bsums), 5);
      sum[t] = _mm256_setzero_si256();
    }
    for (int h = 0; h < 2; ++h) {  // 128 elements, scales 8h..8h+7
      const __m256i sc = h == 0 ? _mm256_permute2x128_si256(scales16, scales16, 0x00)
                                : _mm256_permute2x128_si256(scales16, scales16, 0x11);
      __m256i q[4];
      unpack_q6_k_half(x[i], h, q);
      for (int k = 0; k < 4; ++k) {
        const __m256i sck = _mm256_shuffle_epi8(sc, ctrl[k]);
        for (int t = 0; t < NT; ++t) {
          const __m256i p = _mm256_maddubs_epi16(q[k], load_i8x32(y[t][i].qs + 128 * h + 32 * k));
          sum[t] = _mm256_add_epi32(sum[t], _mm256_madd_epi16(p, sck));
        }
      }
    }
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y[t][i].d * dw), _mm256_cvtepi32_ps(_mm256_sub_epi32(sum[t], offset[t])),
                               acc[t]);
  }
  for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]);
}

float dot_iq4_xs(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockIQ4_XS*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i table = table16(kIQ4NLValues);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = y[i].d * half_to_float(x[i].d);
    __m256i sum0 = _mm256_setzero_si256(), sum1 = _mm256_setzero_si256();
    for (int s = 0; s < 8; s += 2) {
      const int ls0 = (((x[i].scales_l[s / 2] >> 0) & 0x0F) | (((x[i].scales_h >> (2 * s)) & 3) << 4)) - 32;
      const int ls1 = (((x[i].scales_l[s / 2] >> 4) & 0x0F) | (((x[i].scales_h >> (2 * s + 2)) & 3) << 4)) - 32;
      const __m256i v0 = _mm256_shuffle_epi8(table, unpack_nibbles_32(x[i].qs + 16 * s));
      const __m256i v1 = _mm256_shuffle_epi8(table, unpack_nibbles_32(x[i].qs + 16 * s + 16));
      const __m256i a0 = load_i8x32(y[i].qs + 32 * s);
      const __m256i a1 = load_i8x32(y[i].qs + 32 * s + 32);
      const __m256i p0 = _mm256_maddubs_epi16(_mm256_sign_epi8(v0, v0), _mm256_sign_epi8(a0, v0));
      const __m256i p1 = _mm256_maddubs_epi16(_mm256_sign_epi8(v1, v1), _mm256_sign_epi8(a1, v1));
      sum0 = _mm256_add_epi32(sum0, _mm256_madd_epi16(p0, _mm256_set1_epi16(static_cast<int16_t>(ls0))));
      sum1 = _mm256_add_epi32(sum1, _mm256_madd_epi16(p1, _mm256_set1_epi16(static_cast<int16_t>(ls1))));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_add_epi32(sum0, sum1)), acc);
  }
  return hsum(acc);
}

}  // namespace

VecDotFn vec_dot_avx2_fn(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
      return dot_f32;
    case GgmlType::F16:
      return dot_half<load_f16x8, fp16_to_fp32>;
    case GgmlType::BF16:
      return dot_half<load_bf16x8, bf16_to_fp32>;
    case GgmlType::Q8_0:
      return one_row<dot_q8_0_rows<1>>;
    case GgmlType::Q4_0:
      return one_row<dot_q4_0_rows<1>>;
    case GgmlType::IQ4_NL:
      return one_row<dot_iq4_nl_rows<1>>;
    case GgmlType::MXFP4:
      return one_row<dot_mxfp4_rows<1>>;
    case GgmlType::NVFP4:
      return one_row<dot_nvfp4_rows<1>>;
    case GgmlType::Q2_K:
      return dot_q2_k_avx2;
    case GgmlType::Q3_K:
      return dot_q3_k_avx2;
    case GgmlType::Q4_K:
      return one_row<dot_q4_k_rows<1>>;
    case GgmlType::Q5_K:
      return one_row<dot_q5_k_rows<1>>;
    case GgmlType::Q6_K:
      return one_row<dot_q6_k_rows<1>>;
    case GgmlType::IQ4_XS:
      return dot_iq4_xs;
    default:
      if (VecDotFn f = vec_dot_iqk_avx2_fn(t)) return f;
      if (VecDotFn f = vec_dot_iq_avx2_fn(t)) return f;
      return vec_dot_kt_avx2_fn(t);
  }
}

VecDot4Fn vec_dot4_avx2_fn(GgmlType t) {
  switch (t) {
    case GgmlType::Q8_0:
      return dot_q8_0_rows<4>;
    case GgmlType::Q4_0:
      return dot_q4_0_rows<4>;
    case GgmlType::IQ4_NL:
      return dot_iq4_nl_rows<4>;
    case GgmlType::MXFP4:
      return dot_mxfp4_rows<4>;
    case GgmlType::NVFP4:
      return dot_nvfp4_rows<4>;
    case GgmlType::Q4_K:
      return dot_q4_k_rows<4>;
    case GgmlType::Q5_K:
      return dot_q5_k_rows<4>;
    case GgmlType::Q6_K:
      return dot_q6_k_rows<4>;
    default:
      return nullptr;
  }
}

}  // namespace mla::quant
