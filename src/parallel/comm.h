#pragma once
// The communicator between the ranks of one model (one process per rank, launched by mpirun).
// The model and the engine see only this interface; the MPI implementation lives in
// comm_mpi.cpp (built when CMake finds MPI, MLA_HAVE_MPI). A single process is rank 0 of 1, and
// nothing here is ever called on it except rank()/size().
//
// Every operation is blocking and every rank calls the collectives in the same order. There is
// no reduction primitive on purpose: MPI's reduction order is the implementation's choice, so
// the model sums partial results itself, in a fixed rank order (see model/deepseek2.cpp).
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace mla {

// Bytes this rank moved through the communicator (sent + received), for `mla bench` and the
// scaling model in docs/SCALING.md. Collectives count the bytes of the rank's own buffers.
struct CommCounters {
  std::atomic<int64_t> bytes_sent{0};
  std::atomic<int64_t> bytes_received{0};
  std::atomic<int64_t> messages{0};
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // `bytes` bytes of `data` on root copied into `data` on every other rank.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // The same, but a rank waiting here sleeps between polls instead of spinning: for the workers'
  // wait for rank 0's next step, which may be minutes away on an idle server.
  virtual void broadcast_idle(void* data, size_t bytes, int root) { broadcast(data, bytes, root); }
  // Point to point on the compute channel, matched in order between a pair of ranks.
  virtual void send(const void* data, size_t bytes, int dest) = 0;
  virtual void recv(void* data, size_t bytes, int src) = 0;
  // Every rank's `bytes` bytes of `mine`, in rank order, into `all` (size() * bytes).
  virtual void all_gather(const void* mine, size_t bytes, void* all) = 0;

  const CommCounters& counters() const { return counters_; }

 protected:
  CommCounters counters_;
};

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

}  // namespace mla
