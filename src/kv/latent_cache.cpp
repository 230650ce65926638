#include "kv/latent_cache.h"

#include "util/error.h"

namespace mla {

LatentCache::LatentCache(int64_t n_layer, int64_t n_slots, int64_t row_dim)
    : n_layer_(n_layer), n_slots_(n_slots), row_dim_(row_dim) {
  if (n_layer < 1 || n_slots < 1 || row_dim < 1)
    fail("latent cache: bad geometry {} layers x {} slots x {} floats", n_layer, n_slots, row_dim);
  data_.assign(static_cast<size_t>(n_layer * n_slots * row_dim), 0.0f);
}

}  // namespace mla
