#pragma once
// Internal to the attention kernels: which context rows a query attends to, and reading one
// row out of the cache in its dtype.
#include <cstdint>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/simd16.h"
#include "quant/quant.h"

namespace mla::attn {

// The context rows query i attends to: its selection, or rows [0, n_vis) when dense.
struct QueryRows {
  const int32_t* list = nullptr;
  int64_t n = 0;
  int64_t operator[](int64_t k) const { return list ? list[k] : k; }
};

inline QueryRows rows_of(const MlaAttnParams& p, int64_t i) {
  if (p.sel) return {p.sel + i * p.sel_stride, p.sel_count[i]};
  return {nullptr, p.n_ctx - p.n_q + i + 1};
}

inline const uint8_t* raw_row(const MlaAttnParams& p, int64_t j) {
  return static_cast<const uint8_t*>(p.cache) + p.slots[j] * p.cache_row_bytes;
}

// Context row j as F32 (kv_lora + qk_rope floats) into out; dq is the cache type's dequantization.
inline void load_row(const MlaAttnParams& p, DequantizeFn dq, int64_t j, float* out) {
  const int64_t n = p.kv_lora + p.qk_rope;
  if (p.cache_type == GgmlType::F32)
    std::memcpy(out, raw_row(p, j), sizeof(float) * n);
  else if (p.cache_type == GgmlType::F16)
    simd::f16_to_f32(reinterpret_cast<const uint16_t*>(raw_row(p, j)), out, n, dq);
  else
    dq(raw_row(p, j), out, n);
}

// Asks for context row j's bytes ahead of its load_row: the rows of a paged cache are scattered,
// so the hardware prefetcher does not see the next one coming.
inline void prefetch_row(const MlaAttnParams& p, int64_t j) {
  const uint8_t* row = raw_row(p, j);
  for (int64_t b = 0; b < p.cache_row_bytes; b += 64) __builtin_prefetch(row + b);
}

// Hands out consecutive pieces of a thread's buffer of T. Over no buffer it only counts, so a kernel
// describes each phase's layout once, in one function, and uses it both to size the buffer
// (Carve<T>{}: used()) and to carve it (Carve<T>{base}).
template <class T>
class Carve {
 public:
  explicit Carve(T* base = nullptr) : base_(base) {}
  T* take(int64_t n) {
    T* p = base_ ? base_ + used_ : nullptr;
    used_ += n;
    return p;
  }
  // n values of U in the room of n Ts (F32 rows dequantized before they are widened to double).
  template <class U>
  U* take_as(int64_t n) {
    static_assert(sizeof(U) <= sizeof(T));
    return reinterpret_cast<U*>(take(n));
  }
  int64_t used() const { return used_; }

 private:
  T* base_;
  int64_t used_ = 0;
};

// Grows every thread's head buffer (AttnScratch::heads) to n floats; before a parallel region,
// where resizing the outer vector would race.
inline void reserve_head_buffers(AttnScratch& s, int n_threads, size_t n) {
  if (static_cast<int>(s.heads.size()) < n_threads) s.heads.resize(n_threads);
  for (auto& v : s.heads)
    if (v.size() < n) v.resize(n);
}

}  // namespace mla::attn
