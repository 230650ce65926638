#include "parallel/world.h"

#include <cstring>
#include <memory>

#ifdef MLA_HAVE_MPI
#include "parallel/mpi_backend.h"
#endif

namespace mla {
namespace {

class LocalComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  // One rank: a broadcast, gather or exchange has nobody to talk to.
  void broadcast(void*, size_t, int) override {}
  void send(const void*, size_t, int) override {}
  void recv(void*, size_t, int) override {}
  void all_gather(const void* mine, size_t bytes, void* all) override {
    if (all != mine) std::memcpy(all, mine, bytes);
  }
};

std::unique_ptr<Comm>& world_comm() {
  static std::unique_ptr<Comm> comm = std::make_unique<LocalComm>();
  return comm;
}
bool g_mpi_started = false;

}  // namespace

World::World(int& argc, char**& argv) {
#ifdef MLA_HAVE_MPI
  if (mpi::launched_by_mpi()) {
    world_comm() = mpi::start(argc, argv);
    g_mpi_started = true;
  }
#else
  (void)argc;
  (void)argv;
#endif
}

World::~World() {
#ifdef MLA_HAVE_MPI
  if (g_mpi_started) {
    world_comm() = std::make_unique<LocalComm>();  // frees the MPI communicator before MPI_Finalize
    mpi::stop();
    g_mpi_started = false;
  }
#endif
}

Comm& world() { return *world_comm(); }
bool is_worker() { return world().rank() > 0; }

std::string mpi_build_info() {
#ifdef MLA_HAVE_MPI
  return "mpi (" + mpi::library_version() + ")";
#else
  return "none";
#endif
}

}  // namespace mla
