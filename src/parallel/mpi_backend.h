#pragma once
// The MPI side of World (comm_mpi.cpp, built only with MLA_HAVE_MPI). Not for use elsewhere.
#include <memory>
#include <optional>
#include <string>

#include "parallel/comm.h"

namespace mla::mpi {

// True when this process was started by an MPI launcher (mpirun / mpiexec).
bool launched_by_mpi();
// MPI_Init_thread, the environment broadcast and the log forwarding. Returns the world communicator.
std::unique_ptr<Comm> start(int& argc, char**& argv);
// Rank 0: why the job cannot go on (a worker is gone), once known.
std::optional<std::string> failure();
// Rank 0: checks the workers now; one silent for longer than max_silence_s counts as gone.
void check_workers(double max_silence_s);
// Log forwarding drained and stopped, MPI_Finalize (MPI_Abort of the whole job after a failure).
void stop();
std::string library_version();

}  // namespace mla::mpi
