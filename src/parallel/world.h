#pragma once
// The process's place among the ranks of one model. Built with MPI (MLA_HAVE_MPI) and started by
// mpirun, a World joins the MPI job: rank 0 sends its MLA_* environment to the workers (a worker
// whose own environment disagrees logs a warning) and every worker's log lines go to rank 0's
// log sink, tagged `[rank N]`. Anything else is one process, rank 0 of 1.
#include <optional>
#include <string>

#include "parallel/comm.h"

namespace mla {

class World {
 public:
  // The first thing main() does; argc/argv as main got them.
  World(int& argc, char**& argv);
  // Flushes the workers' logs into rank 0's sink and leaves the MPI job.
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;
};

// This process's communicator (a one-rank one without MPI). Valid for the World's lifetime.
Comm& world();
bool is_worker();  // rank > 0

// Rank 0 of a multi-process run: set once a worker rank was found gone (its process exited, or
// it stopped sending its heartbeat), naming the rank; from then on every communication throws
// UnavailableError with this text, so the engine fails its requests with 503. nullopt otherwise.
std::optional<std::string> world_failure();
// Rank 0: checks the workers at once, counting one silent for longer than max_silence_s as gone
// (mla serve does this on SIGTERM, which mpirun sends when a rank died; a short silence is no
// proof of death on a loaded machine, so it passes the usual 5 s).
void check_workers(double max_silence_s);

// Thrown on a worker rank to leave main() with `code` without printing anything: the reason was
// already reported once, by rank 0.
struct WorkerExit {
  int code = 0;
};

// "mpi (open mpi 4.1.4)" or "none": what the build supports, for `mla version`.
std::string mpi_build_info();

}  // namespace mla
