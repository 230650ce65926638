#include "parallel/world.h"

#include <pthread.h>
#include <signal.h>  // NOLINT(modernize-deprecated-headers): POSIX pthread_sigmask

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
#ifdef MLA_HAVE_MPI
bool g_mpi_started = false;
#endif

}  // namespace

World::World(int& argc, char**& argv) {
#ifdef MLA_HAVE_MPI
  if (mpi::launched_by_mpi()) {
    // The threads MPI and the log forwarding start must not take SIGINT/SIGTERM (whose default
    // action ends the process): they keep them blocked, and the commands' own handling (mla
    // serve's graceful stop) sees them on the main thread as in a single process.
    sigset_t stop_signals, old;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, &old);
    world_comm() = mpi::start(argc, argv);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
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

std::optional<std::string> world_failure() {
#ifdef MLA_HAVE_MPI
  if (g_mpi_started) return mpi::failure();
#endif
  return std::nullopt;
}

void check_workers(double max_silence_s) {
#ifdef MLA_HAVE_MPI
  if (g_mpi_started) mpi::check_workers(max_silence_s);
#else
  (void)max_silence_s;
#endif
}

std::string mpi_build_info() {
#ifdef MLA_HAVE_MPI
  return "mpi (" + mpi::library_version() + ")";
#else
  return "none";
#endif
}

}  // namespace mla
