#pragma once
// The communicator between the ranks of one model (one process per rank, launched by mpirun).
// The model sees it as model/model_comm.h's ModelComm (the collectives its forward calls); the
// engine side adds the idle wait and the byte counters here. The MPI implementation lives in
// comm_mpi.cpp (built when CMake finds MPI, MLA_HAVE_MPI). A single process is rank 0 of 1, and
// nothing here is ever called on it except rank()/size().
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "model/model_comm.h"

namespace mla {

// Bytes this rank moved through the communicator (sent + received), for `mla bench` and the
// scaling model in docs/SCALING.md. Collectives count the bytes of the rank's own buffers.
struct CommCounters {
  std::atomic<int64_t> bytes_sent{0};
  std::atomic<int64_t> bytes_received{0};
  std::atomic<int64_t> messages{0};
};

class Comm : public ModelComm {
 public:
  // As broadcast, but a rank waiting here sleeps between polls instead of spinning: for the
  // workers' wait for rank 0's next step, which may be minutes away on an idle server.
  virtual void broadcast_idle(void* data, size_t bytes, int root) { broadcast(data, bytes, root); }

  const CommCounters& counters() const { return counters_; }

 protected:
  CommCounters counters_;
};

}  // namespace mla
