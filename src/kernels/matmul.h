#pragma once
// Matmul of a (possibly quantized) weight matrix with F32 activations, the way ggml does it:
// each activation row is quantized once to the weight type's vec_dot_type, then every output
// is one quant.h vec_dot of a weight row with an activation row.
//
// Threads split the output rows statically; a single output is never split, so results are
// bit-identical whatever the batch size or thread count (batch invariance).
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <vector>

#include "kernels/thread_pool.h"
#include "util/ggml_type.h"

namespace mla {

// A row-major weight: n_rows rows of n_cols elements (ggml ne[0] = n_cols), row_bytes apart.
struct WeightMatrix {
  GgmlType type = GgmlType::F32;
  const uint8_t* data = nullptr;
  int64_t n_cols = 0;
  int64_t n_rows = 0;
  int64_t row_bytes = 0;
  float scale = 1.0f;  // a per-tensor `<name>.scale` of shape {1}: the caller multiplies the outputs by it
  // The same rows repacked into 16-row groups (quant/packed.h), or nullptr. When set, matmul
  // computes every row from the groups, whatever the batch; data stays valid for row().
  const uint8_t* packed = nullptr;
  int64_t packed_group_bytes = 0;

  const uint8_t* row(int64_t r) const { return data + r * row_bytes; }
  // Rows [first, first + n) as a matrix of their own (an expert's slice of a 3-D tensor). The
  // slice keeps the packed groups when it starts and ends on a group boundary.
  WeightMatrix rows(int64_t first, int64_t n) const {
    WeightMatrix m = *this;
    m.data = row(first);
    m.n_rows = n;
    const bool aligned = first % 16 == 0 && n % 16 == 0;
    m.packed = packed && aligned ? packed + first / 16 * packed_group_bytes : nullptr;
    return m;
  }
};

// Owns the repacked copies of weight matrices (64-byte aligned). reserve(n) maps one arena
// of n bytes, 2 MiB aligned and advised for transparent huge pages (a decode step streams the
// whole copy; with 4 KiB pages that is a TLB miss every 4 KiB), which later allocate() calls are
// carved from; an allocation that does not fit gets a mapping of its own.
class PackedWeightStore {
 public:
  PackedWeightStore() = default;
  PackedWeightStore(const PackedWeightStore&) = delete;
  PackedWeightStore& operator=(const PackedWeightStore&) = delete;
  ~PackedWeightStore();

  void reserve(size_t bytes);
  uint8_t* allocate(size_t bytes);
  size_t bytes() const { return bytes_; }

 private:
  struct Mapping {
    void* base;
    size_t bytes;
  };
  uint8_t* map(size_t bytes);
  std::vector<Mapping> mappings_;
  uint8_t* arena_ = nullptr;
  size_t arena_left_ = 0;
  size_t bytes_ = 0;
};

// Repacks w into 16-row groups held by store when this CPU has a packed kernel for w.type
// (quant/packed.h: the AVX-512 VNNI or AVX2 family, repacking not off) and every slice of slice_rows
// rows (an expert's rows of a 3-D tensor; n_rows for a 2-D one) is a whole number of groups.
// Returns whether it did.
bool repack_weight(WeightMatrix& w, int64_t slice_rows, PackedWeightStore& store);
// The bytes repack_weight would allocate for w (0 when it would not repack it).
int64_t repacked_bytes(const WeightMatrix& w, int64_t slice_rows);

// Holds activations quantized for one matmul call. Grows on first use to the largest size
// needed, so steady-state calls do not allocate.
struct MatmulScratch {
  std::vector<uint8_t> act;
  std::vector<uint8_t> act2;  // matmul_multi's second activation type
};

// y[t * y_stride + r] = sum_k W[r][k] * x[t * x_stride + k] for t < n_tok, r < w.n_rows.
// x rows hold w.n_cols floats. Throws mla::Error if the weight type has no dot kernel.
void matmul(const WeightMatrix& w, const float* x, int64_t x_stride, int64_t n_tok, float* y, int64_t y_stride,
            ThreadPool& pool, MatmulScratch& scratch);

// Several matrices over the same input rows (each with w.n_cols == n_cols) in one parallel
// region: the input quantized once per activation type (at most two types; more fall back to
// one matmul each), the threads' shares cut by weight bytes across all of them, and a small
// product (under kMatmulInlineBytes of weights times tokens) run on the calling thread, where a
// hand-off would cost more than the work. Every output row is computed exactly as matmul
// computes it, whatever the split.
struct MatmulOut {
  const WeightMatrix* w;
  float* y;
  int64_t y_stride;
};
inline constexpr int64_t kMatmulInlineBytes = 64 * 1024;
void matmul_multi(std::initializer_list<MatmulOut> outs, const float* x, int64_t x_stride, int64_t n_tok,
                  int64_t n_cols, ThreadPool& pool, MatmulScratch& scratch);

// matmul in two halves, for callers that schedule the work themselves (the MoE layer runs every
// expert's rows in one parallel region): activation rows quantized once for a weight type, then
// any block of output rows computed on the calling thread. matmul() is exactly these two.
struct QuantizedActivations {
  const uint8_t* data = nullptr;  // n_tok rows of the weight type's vec_dot_type (F32: x itself),
                                  // each followed by its packed_act_extra where packing is on
  int64_t row_bytes = 0;
};
QuantizedActivations quantize_activations(GgmlType weight_type, const float* x, int64_t x_stride, int64_t n_tok,
                                          int64_t n_cols, ThreadPool* pool, std::vector<uint8_t>& buf);
// y[t * y_stride + r] for t < n_tok and r in [r0, r1).
void matmul_rows(const WeightMatrix& w, const QuantizedActivations& act, int64_t n_tok, float* y, int64_t y_stride,
                 int64_t r0, int64_t r1);

// Single-threaded reference with the scalar vec_dot_ref kernels, same activation quantization.
void matmul_ref(const WeightMatrix& w, const float* x, int64_t x_stride, int64_t n_tok, float* y, int64_t y_stride);

// True when matmul supports this weight type (a dot kernel and a quantizer for its vec_dot_type).
bool matmul_supports(GgmlType t);

}  // namespace mla
