#include "kernels/matmul.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "quant/packed.h"
#include "quant/quant.h"
#include "util/error.h"

namespace mla {
namespace {

// Bytes of packed-kernel sums appended to each activation row of act_type: only where this CPU
// runs packed kernels (one family per process; which types it packs may differ, so any counts).
int64_t act_extra_bytes(GgmlType act_type, int64_t n_cols) {
  static const bool packing = std::strcmp(packed_gemm_family(), "none") != 0;
  return packing ? packed_act_extra_bytes(act_type, n_cols) : 0;
}

constexpr int64_t kInlineQuantizeElems = 16 * 1024;

// Quantizes n_tok activation rows to `act_type`, one row per token, row_bytes apart. F32 rows
// are used in place (returns x); otherwise returns the scratch buffer.
const uint8_t* prepare_activations(GgmlType act_type, const float* x, int64_t x_stride, int64_t n_tok, int64_t n_cols,
                                   int64_t& act_row_bytes, ThreadPool* pool, std::vector<uint8_t>& buf) {
  if (act_type == GgmlType::F32) {
    act_row_bytes = x_stride * static_cast<int64_t>(sizeof(float));
    return reinterpret_cast<const uint8_t*>(x);
  }
  const int64_t quant_bytes = ggml_row_bytes(act_type, n_cols);
  const int64_t extra_bytes = act_extra_bytes(act_type, n_cols);
  act_row_bytes = quant_bytes + extra_bytes;
  size_t need = static_cast<size_t>(act_row_bytes * n_tok);
  if (buf.size() < need) buf.resize(need);
  uint8_t* out = buf.data();
  QuantizeFn q = quantize_fn(act_type);
  auto body = [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      uint8_t* row = out + t * act_row_bytes;
      q(x + t * x_stride, row, n_cols);
      if (extra_bytes > 0) packed_act_extra(act_type, row, n_cols, row + quant_bytes);
    }
  };
  // A few rows (a decode step's expert inputs) cost less than a hand-off.
  if (pool && n_tok * n_cols > kInlineQuantizeElems)
    pool->parallel_for(n_tok, body);
  else
    body(0, n_tok, 0);
  return out;
}

// matmul_rows over packed groups: rows [r0, r1) come from the groups that cover them (a group
// cut by the range is computed whole and only its rows in range are stored).
void matmul_rows_packed(const WeightMatrix& w, PackedGemmFn gemm, const QuantizedActivations& act, int64_t n_tok,
                        float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  const int64_t g0 = r0 / kPackedRows, g1 = (r1 + kPackedRows - 1) / kPackedRows;
  const int64_t gb = w.packed_group_bytes, rb = act.row_bytes;
  // Groups in chunks that stay in L2 while every token tile passes over them.
  const int64_t chunk = std::max<int64_t>(1, (192 * 1024) / gb);
  alignas(64) float out[kPackedMaxTokens * kPackedRows];
  for (int64_t c0 = g0; c0 < g1; c0 += chunk) {
    const int64_t c1 = std::min(g1, c0 + chunk);
    for (int64_t t0 = 0; t0 < n_tok; t0 += kPackedMaxTokens) {
      const int nt = static_cast<int>(std::min<int64_t>(kPackedMaxTokens, n_tok - t0));
      for (int64_t g = c0; g < c1; ++g) {
        gemm(w.n_cols, w.packed + g * gb, act.data + t0 * rb, rb, nt, out);
        const int64_t lo = std::max(r0, g * kPackedRows), hi = std::min(r1, (g + 1) * kPackedRows);
        for (int t = 0; t < nt; ++t)
          std::copy(out + t * kPackedRows + (lo - g * kPackedRows), out + t * kPackedRows + (hi - g * kPackedRows),
                    y + (t0 + t) * y_stride + lo);
      }
    }
  }
}

}  // namespace

PackedWeightStore::~PackedWeightStore() {
  for (const Mapping& m : mappings_) munmap(m.base, m.bytes);
}

uint8_t* PackedWeightStore::map(size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
  // Over-map by one huge page, then trim to a 2 MiB aligned start.
  void* raw = mmap(nullptr, rounded + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) fail("out of memory: repacking weights needs {} more bytes", rounded);
  auto* base = static_cast<uint8_t*>(raw);
  const size_t lead = (kHuge - reinterpret_cast<uintptr_t>(raw) % kHuge) % kHuge;
  uint8_t* p = base + lead;
  if (lead > 0) munmap(base, lead);
  if (const size_t tail = kHuge - lead; tail > 0) munmap(p + rounded, tail);
  madvise(p, rounded, MADV_HUGEPAGE);  // advice only: without THP the mapping works the same
  mappings_.push_back({p, rounded});
  return p;
}

void PackedWeightStore::reserve(size_t bytes) {
  if (bytes == 0) return;
  arena_ = map(bytes);
  arena_left_ = (bytes + (size_t{2} << 20) - 1) / (size_t{2} << 20) * (size_t{2} << 20);
}

uint8_t* PackedWeightStore::allocate(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  bytes_ += rounded;
  if (rounded <= arena_left_) {
    uint8_t* p = arena_;
    arena_ += rounded;
    arena_left_ -= rounded;
    return p;
  }
  return map(rounded);
}

int64_t repacked_bytes(const WeightMatrix& w, int64_t slice_rows) {
  if (w.packed || w.n_rows <= 0 || packed_gemm_fn(w.type) == nullptr) return 0;
  if (slice_rows <= 0 || slice_rows % kPackedRows != 0 || w.n_rows % slice_rows != 0) return 0;
  return packed_group_bytes(w.type, w.n_cols) * (w.n_rows / kPackedRows);
}

bool repack_weight(WeightMatrix& w, int64_t slice_rows, PackedWeightStore& store) {
  if (repacked_bytes(w, slice_rows) == 0) return false;
  const int64_t gb = packed_group_bytes(w.type, w.n_cols), n_groups = w.n_rows / kPackedRows;
  uint8_t* dst = store.allocate(static_cast<size_t>(gb * n_groups));
  for (int64_t g = 0; g < n_groups; ++g) pack_rows(w.type, w.row(g * kPackedRows), w.row_bytes, w.n_cols, dst + g * gb);
  w.packed = dst;
  w.packed_group_bytes = gb;
  return true;
}

bool matmul_supports(GgmlType t) {
  if (!can_dequantize(t)) return false;
  try {
    GgmlType a = vec_dot_type(t);
    return (a == GgmlType::F32 || can_quantize(a)) && vec_dot_fn(t) != nullptr;
  } catch (const Error&) {
    return false;
  }
}

QuantizedActivations quantize_activations(GgmlType weight_type, const float* x, int64_t x_stride, int64_t n_tok,
                                          int64_t n_cols, ThreadPool* pool, std::vector<uint8_t>& buf) {
  QuantizedActivations q;
  q.data = prepare_activations(vec_dot_type(weight_type), x, x_stride, n_tok, n_cols, q.row_bytes, pool, buf);
  return q;
}

void matmul_rows(const WeightMatrix& w, const QuantizedActivations& act, int64_t n_tok, float* y, int64_t y_stride,
                 int64_t r0, int64_t r1) {
  if (w.packed) {
    if (PackedGemmFn gemm = packed_gemm_fn(w.type)) return matmul_rows_packed(w, gemm, act, n_tok, y, y_stride, r0, r1);
  }
  const VecDotFn dot = vec_dot_fn(w.type);
  const VecDot4Fn dot4 = n_tok >= 4 ? vec_dot4_fn(w.type) : nullptr;  // same results, fewer weight loads
  const int64_t rb = act.row_bytes;
  // Token tiles small enough to stay in L2 while each weight row of the tile is streamed once.
  const int64_t tile = std::clamp<int64_t>((256 * 1024) / std::max<int64_t>(rb, 1), 1, 64);
  const int64_t n_cols = w.n_cols;
  for (int64_t t0 = 0; t0 < n_tok; t0 += tile) {
    const int64_t t1 = std::min(n_tok, t0 + tile);
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* wr = w.row(r);
      int64_t t = t0;
      if (dot4)
        for (float out[4]; t + 4 <= t1; t += 4) {
          dot4(n_cols, wr, act.data + t * rb, rb, out);
          for (int k = 0; k < 4; ++k) y[(t + k) * y_stride + r] = out[k];
        }
      for (; t < t1; ++t) y[t * y_stride + r] = dot(n_cols, wr, act.data + t * rb);
    }
  }
}

void matmul(const WeightMatrix& w, const float* x, int64_t x_stride, int64_t n_tok, float* y, int64_t y_stride,
            ThreadPool& pool, MatmulScratch& scratch) {
  matmul_multi({{&w, y, y_stride}}, x, x_stride, n_tok, w.n_cols, pool, scratch);
}

void matmul_multi(std::initializer_list<MatmulOut> outs, const float* x, int64_t x_stride, int64_t n_tok,
                  int64_t n_cols, ThreadPool& pool, MatmulScratch& scratch) {
  constexpr int kMaxOuts = 4;
  if (n_tok <= 0) return;
  // One quantized input per distinct activation type (two at most).
  GgmlType types[2]{};
  int n_types = 0;
  bool one_by_one = outs.size() > kMaxOuts;
  for (const MatmulOut& o : outs) {
    const GgmlType a = vec_dot_type(o.w->type);
    int k = 0;
    while (k < n_types && types[k] != a) ++k;
    if (k < n_types) continue;
    if (n_types == 2) {
      one_by_one = true;
      break;
    }
    types[n_types++] = a;
  }
  if (one_by_one) {
    for (const MatmulOut& o : outs) matmul_multi({o}, x, x_stride, n_tok, n_cols, pool, scratch);
    return;
  }
  QuantizedActivations acts[2];
  for (int i = 0; i < n_types; ++i)
    acts[i].data = prepare_activations(types[i], x, x_stride, n_tok, n_cols, acts[i].row_bytes, &pool,
                                       i == 0 ? scratch.act : scratch.act2);
  // Work units: a matrix's 16-row groups when packed (a thread always runs whole groups), else
  // its rows; unit u of matrix i starts at byte start[i] + u * unit_bytes[i] of all the weights.
  struct Part {
    const MatmulOut* o;
    const QuantizedActivations* act;
    int64_t unit_rows, unit_bytes, n_units, start;
  };
  Part parts[kMaxOuts];
  int n_parts = 0;
  int64_t total = 0;
  for (const MatmulOut& o : outs) {
    const WeightMatrix& w = *o.w;
    if (w.n_rows <= 0) continue;
    Part& p = parts[n_parts++];
    p.o = &o;
    p.act = &acts[vec_dot_type(w.type) == types[0] ? 0 : 1];
    p.unit_rows = w.packed ? kPackedRows : 1;
    p.unit_bytes = w.packed ? w.packed_group_bytes : w.row_bytes;
    p.n_units = (w.n_rows + p.unit_rows - 1) / p.unit_rows;
    p.start = total;
    total += p.unit_bytes * p.n_units;
  }
  // Bytes [b0, b1) of the weights: the units that start in it.
  auto run_bytes = [&](int64_t b0, int64_t b1) {
    for (int i = 0; i < n_parts; ++i) {
      const Part& p = parts[i];
      auto first_unit = [&](int64_t b) {
        return std::clamp<int64_t>((b - p.start + p.unit_bytes - 1) / p.unit_bytes, 0, p.n_units);
      };
      const int64_t u0 = b0 <= p.start ? 0 : first_unit(b0), u1 = b1 <= p.start ? 0 : first_unit(b1);
      if (u0 < u1)
        matmul_rows(*p.o->w, *p.act, n_tok, p.o->y, p.o->y_stride, u0 * p.unit_rows,
                    std::min(p.o->w->n_rows, u1 * p.unit_rows));
    }
  };
  if (total == 0) return;
  if (pool.n_threads() == 1 || total * n_tok < kMatmulInlineBytes) return run_bytes(0, total);
  pool.run([&](int t) {
    const auto [b0, b1] = static_chunk(total, pool.n_threads(), t);
    run_bytes(b0, b1);
  });
}

void matmul_ref(const WeightMatrix& w, const float* x, int64_t x_stride, int64_t n_tok, float* y, int64_t y_stride) {
  const GgmlType act_type = vec_dot_type(w.type);
  std::vector<uint8_t> own;
  int64_t act_row_bytes = 0;
  const uint8_t* act = prepare_activations(act_type, x, x_stride, n_tok, w.n_cols, act_row_bytes, nullptr, own);
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t r = 0; r < w.n_rows; ++r)
      y[t * y_stride + r] = vec_dot_ref(w.type, w.n_cols, w.row(r), act + t * act_row_bytes);
}

}  // namespace mla
