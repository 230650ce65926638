#pragma once
// The MPI side of World (comm_mpi.cpp, built only with MLA_HAVE_MPI). Not for use elsewhere.
#include <memory>
#include <string>

#include "parallel/comm.h"

namespace mla::mpi {

// True when this process was started by an MPI launcher (mpirun / mpiexec).
bool launched_by_mpi();
// MPI_Init_thread, the environment broadcast and the log forwarding. Returns the world communicator.
std::unique_ptr<Comm> start(int& argc, char**& argv);
// Log forwarding drained and stopped, MPI_Finalize.
void stop();
std::string library_version();

}  // namespace mla::mpi
