#pragma once
// Tensor parallelism without a reduction: a rank computes whole outputs (its attention heads, its
// rows of a weight matrix) and the ranks exchange them, so every value is computed exactly as one
// process computes it and the result is bit for bit the single-process one. (A split of a dot
// product's inner dimension would need a reduction whose rounding differs from the unsplit sum.)
#include <cstdint>
#include <vector>

#include "parallel/comm.h"

namespace mla {

// y holds n_rows rows, y_stride floats apart, of n_units * unit_width columns; rank r computed
// the columns of units shard_range(n_units, r, size). Afterwards every rank holds all columns.
// scratch grows to (size + 1) * n_rows * ceil(n_units / size) * unit_width floats.
void all_gather_columns(Comm& comm, float* y, int64_t y_stride, int64_t n_rows, int64_t n_units, int64_t unit_width,
                        std::vector<float>& scratch);

}  // namespace mla
