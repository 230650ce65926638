#pragma once
// The other ranks of one model, as the forward sees them: the model is split across several
// processes (expert and tensor parallelism, ModelOptions::comm) and exchanges whole results with
// them through this interface. It is declared here, below the model, so that the model knows
// nothing of how the ranks talk; src/parallel/comm.h's Comm implements it over MPI (and tests over
// threads).
//
// Every operation is blocking and every rank calls the collectives in the same order. There is
// no reduction primitive on purpose: MPI's reduction order is the implementation's choice, so
// the model sums partial results itself, in a fixed rank order (see model/deepseek2.cpp).
#include <cstddef>
#include <cstdint>
#include <vector>

namespace mla {

class ModelComm {
 public:
  virtual ~ModelComm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // `bytes` bytes of `data` on root copied into `data` on every other rank.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // Point to point on the compute channel, matched in order between a pair of ranks.
  virtual void send(const void* data, size_t bytes, int dest) = 0;
  virtual void recv(void* data, size_t bytes, int src) = 0;
  // Every rank's `bytes` bytes of `mine`, in rank order, into `all` (size() * bytes).
  virtual void all_gather(const void* mine, size_t bytes, void* all) = 0;
};

// A model without a communicator (nullptr) runs in one process: rank 0 of 1.
inline int rank_of(const ModelComm* comm) { return comm ? comm->rank() : 0; }
inline int n_ranks_of(const ModelComm* comm) { return comm ? comm->size() : 1; }

// The contiguous ranges [begin, end) of n items given to each of n_ranks ranks, balanced by
// count: the first n % n_ranks ranks get one more. Used for routed experts and attention heads.
struct ShardRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool contains(int64_t i) const { return i >= begin && i < end; }
};
inline ShardRange shard_range(int64_t n, int rank, int n_ranks) {
  const int64_t base = n / n_ranks, extra = n % n_ranks;
  const int64_t begin = rank * base + (rank < extra ? rank : extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

// Tensor parallelism without a reduction: a rank computes whole outputs (its attention heads, its
// rows of a weight matrix) and the ranks exchange them, so every value is computed exactly as one
// process computes it and the result is bit for bit the single-process one. (A split of a dot
// product's inner dimension would need a reduction whose rounding differs from the unsplit sum.)
//
// y holds n_rows rows, y_stride floats apart, of n_units * unit_width columns; rank r computed
// the columns of units shard_range(n_units, r, size). Afterwards every rank holds all columns.
// scratch grows to (size + 1) * n_rows * ceil(n_units / size) * unit_width floats.
void all_gather_columns(ModelComm& comm, float* y, int64_t y_stride, int64_t n_rows, int64_t n_units,
                        int64_t unit_width, std::vector<float>& scratch);

}  // namespace mla
