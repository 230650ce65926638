#include "model/model_comm.h"

#include <algorithm>
#include <cstring>

namespace mla {

void all_gather_columns(ModelComm& comm, float* y, int64_t y_stride, int64_t n_rows, int64_t n_units,
                        int64_t unit_width, std::vector<float>& scratch) {
  const int n_ranks = comm.size();
  if (n_ranks == 1 || n_rows == 0) return;
  // Every rank sends the same number of floats (the largest share), its rows packed.
  const int64_t max_width = shard_range(n_units, 0, n_ranks).size() * unit_width;
  const int64_t block = n_rows * max_width;
  const size_t need = static_cast<size_t>(block) * (n_ranks + 1);
  if (scratch.size() < need) scratch.resize(need);
  float* mine = scratch.data();
  float* all = scratch.data() + block;
  const ShardRange own = shard_range(n_units, comm.rank(), n_ranks);
  const int64_t c0 = own.begin * unit_width, w = own.size() * unit_width;
  for (int64_t t = 0; t < n_rows; ++t) std::memcpy(mine + t * max_width, y + t * y_stride + c0, sizeof(float) * w);
  comm.all_gather(mine, sizeof(float) * block, all);
  for (int r = 0; r < n_ranks; ++r) {
    if (r == comm.rank()) continue;
    const ShardRange s = shard_range(n_units, r, n_ranks);
    const float* src = all + r * block;
    for (int64_t t = 0; t < n_rows; ++t)
      std::memcpy(y + t * y_stride + s.begin * unit_width, src + t * max_width, sizeof(float) * s.size() * unit_width);
  }
}

}  // namespace mla
