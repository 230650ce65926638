// The MPI communicator, the environment broadcast and the log forwarding (built with MPI only).
#define OMPI_SKIP_MPICXX 1  // the C API only (the C++ bindings are deprecated)
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <spdlog/sinks/base_sink.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "parallel/env_sync.h"
#include "parallel/mpi_backend.h"
#include "util/error.h"
#include "util/log.h"

namespace mla::mpi {
namespace {

constexpr int kTagCompute = 1;
constexpr int kTagLog = 2;        // a worker's log line: one level byte, then the text
constexpr int kTagLogDone = 3;    // a worker's last message on the log channel
constexpr int kTagHeartbeat = 4;  // a worker is alive: every kHeartbeatMs, from its own thread
constexpr int kHeartbeatMs = 100;
// A worker not heard from for this long is gone (one on rank 0's host is also checked directly).
constexpr double kMaxSilenceSeconds = 5.0;
constexpr size_t kMaxChunk = size_t{1} << 30;  // MPI counts are int: large buffers go in pieces

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  fail("MPI {} failed: {}", what, std::string(text, len));
}

// ---- failure: rank 0 declares a worker gone; every wait then throws ----

std::atomic<bool> g_failed{false};
std::mutex g_failure_mu;
std::string g_failure;

void throw_if_failed() {
  if (!g_failed.load(std::memory_order_acquire)) return;
  std::lock_guard lk(g_failure_mu);
  throw UnavailableError(g_failure);
}

// Waits for a request: spins briefly (a step's exchange is usually microseconds away), then
// yields, then sleeps up to max_sleep_us between polls so that an idle rank leaves the CPU to
// the others (Open MPI's blocking calls would spin at 100%).
void wait(MPI_Request& req, int max_sleep_us) {
  int done = 0;
  for (int i = 0; i < 2000 && !done; ++i) check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "test");
  auto sleep_us = 1;
  const auto yield_until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
  while (!done) {
    throw_if_failed();  // a dead peer never completes the request
    if (std::chrono::steady_clock::now() < yield_until) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
      sleep_us = std::min(sleep_us * 2, max_sleep_us);
    }
    check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "test");
  }
}

class MpiComm final : public Comm {
 public:
  MpiComm() {
    check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "comm_dup");
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiComm() override { MPI_Comm_free(&comm_); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void broadcast(void* data, size_t bytes, int root) override { bcast(data, bytes, root, kComputeSleepUs); }
  void broadcast_idle(void* data, size_t bytes, int root) override { bcast(data, bytes, root, kIdleSleepUs); }

  void send(const void* data, size_t bytes, int dest) override {
    in_pieces(bytes, [&](size_t at, int n, MPI_Request* req) {
      return MPI_Isend(static_cast<const char*>(data) + at, n, MPI_BYTE, dest, kTagCompute, comm_, req);
    });
    counters_.bytes_sent.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
    counters_.messages.fetch_add(1, std::memory_order_relaxed);
  }
  void recv(void* data, size_t bytes, int src) override {
    in_pieces(bytes, [&](size_t at, int n, MPI_Request* req) {
      return MPI_Irecv(static_cast<char*>(data) + at, n, MPI_BYTE, src, kTagCompute, comm_, req);
    });
    counters_.bytes_received.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  }
  void all_gather(const void* mine, size_t bytes, void* all) override {
    if (bytes > kMaxChunk) fail("all_gather of {} bytes per rank: larger than one message", bytes);
    MPI_Request req;
    check(MPI_Iallgather(mine, static_cast<int>(bytes), MPI_BYTE, all, static_cast<int>(bytes), MPI_BYTE, comm_, &req),
          "iallgather");
    wait(req, kComputeSleepUs);
    counters_.bytes_sent.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
    counters_.bytes_received.fetch_add(static_cast<int64_t>(bytes) * (size_ - 1), std::memory_order_relaxed);
    counters_.messages.fetch_add(1, std::memory_order_relaxed);
  }

 private:
  static constexpr int kComputeSleepUs = 50;
  static constexpr int kIdleSleepUs = 2000;

  // One nonblocking call per piece of at most kMaxChunk bytes (one empty message for 0 bytes),
  // each waited for: start(offset, count, request) -> MPI error code.
  template <typename Start>
  void in_pieces(size_t bytes, Start start) {
    size_t at = 0;
    do {
      const int n = static_cast<int>(std::min(kMaxChunk, bytes - at));
      MPI_Request req;
      check(start(at, n, &req), "point-to-point");
      wait(req, kComputeSleepUs);
      at += static_cast<size_t>(n);
    } while (at < bytes);
  }

  void bcast(void* data, size_t bytes, int root, int max_sleep_us) {
    auto* p = static_cast<char*>(data);
    for (size_t at = 0; at < bytes; at += kMaxChunk) {
      const int n = static_cast<int>(std::min(kMaxChunk, bytes - at));
      MPI_Request req;
      check(MPI_Ibcast(p + at, n, MPI_BYTE, root, comm_, &req), "ibcast");
      wait(req, max_sleep_us);
    }
    if (rank_ == root) {
      counters_.bytes_sent.fetch_add(static_cast<int64_t>(bytes) * (size_ - 1), std::memory_order_relaxed);
      counters_.messages.fetch_add(1, std::memory_order_relaxed);
    } else {
      counters_.bytes_received.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
    }
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

// ---- log forwarding: workers send, rank 0's receiver thread writes into its sink ----

MPI_Comm g_log_comm = MPI_COMM_NULL;
int g_rank = 0, g_size = 1;
std::thread g_receiver;
std::thread g_heartbeat;  // a worker's
std::atomic<bool> g_heartbeat_stop{false};

// Who each rank is, for naming a dead one and checking it directly when it shares our host.
struct PeerId {
  int32_t pid = 0;
  char host[60] = {};
};
std::vector<PeerId> g_peers;
std::vector<std::chrono::steady_clock::time_point> g_last_seen;  // by rank 0's receiver thread
std::mutex g_seen_mu;

// Same host and the process is gone or a zombie.
bool process_gone(const PeerId& p) {
  char host[60] = {};
  gethostname(host, sizeof host - 1);
  if (std::strcmp(host, p.host) != 0) return false;
  std::ifstream stat("/proc/" + std::to_string(p.pid) + "/stat");
  if (!stat) return true;
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && (line[paren + 2] == 'Z' || line[paren + 2] == 'X');
}

void declare_failed(int rank, const std::string& why) {
  {
    std::lock_guard lk(g_failure_mu);
    if (g_failed.load()) return;
    g_failure = fmt::format("rank {} (pid {} on {}) {}: the multi-process engine cannot continue", rank,
                            g_peers[rank].pid, g_peers[rank].host, why);
  }
  g_failed.store(true, std::memory_order_release);
  log().error("parallel: {}", g_failure);
}

void check_peers(double max_silence_s) {
  const auto now = std::chrono::steady_clock::now();
  for (int r = 1; r < g_size && !g_failed.load(); ++r) {
    if (process_gone(g_peers[r])) {
      declare_failed(r, "exited");
      break;
    }
    double silent = 0;
    {
      std::lock_guard lk(g_seen_mu);
      silent = std::chrono::duration<double>(now - g_last_seen[r]).count();
    }
    if (silent > max_silence_s) declare_failed(r, fmt::format("has not been heard from for {:.1f} s", silent));
  }
}

void send_heartbeats() {
  char none = 0;
  while (!g_heartbeat_stop.load()) {
    MPI_Send(&none, 0, MPI_CHAR, 0, kTagHeartbeat, g_log_comm);
    std::this_thread::sleep_for(std::chrono::milliseconds(kHeartbeatMs));
  }
}
std::vector<spdlog::sink_ptr> g_own_sinks;  // a worker's stderr sink, while its lines are forwarded
std::atomic<bool> g_stopping{false};

class ForwardSink final : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    std::string buf(1, static_cast<char>(msg.level));
    buf.append(msg.payload.data(), msg.payload.size());
    MPI_Send(buf.data(), static_cast<int>(buf.size()), MPI_CHAR, 0, kTagLog, g_log_comm);
  }
  void flush_() override {}
};

void receive_logs() {
  std::vector<char> buf;
  int n_done = 0;
  auto deadline = std::chrono::steady_clock::time_point::max();
  int sleep_us = 1;
  auto next_check = std::chrono::steady_clock::now();
  while (n_done < g_size - 1) {
    const auto now = std::chrono::steady_clock::now();
    if (g_stopping.load() && deadline == std::chrono::steady_clock::time_point::max())
      deadline = now + std::chrono::seconds(g_failed.load() ? 0 : 5);
    if (now > deadline) break;  // a worker that never said goodbye
    if (now >= next_check && !g_stopping.load()) {
      check_peers(kMaxSilenceSeconds);
      next_check = now + std::chrono::milliseconds(kHeartbeatMs);
    }
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, g_log_comm, &flag, &st);
    if (!flag) {
      std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
      sleep_us = std::min(sleep_us * 2, 2000);
      continue;
    }
    sleep_us = 1;
    int count = 0;
    MPI_Get_count(&st, MPI_CHAR, &count);
    buf.resize(std::max(count, 1));
    MPI_Recv(buf.data(), count, MPI_CHAR, st.MPI_SOURCE, st.MPI_TAG, g_log_comm, MPI_STATUS_IGNORE);
    {
      std::lock_guard lk(g_seen_mu);
      g_last_seen[st.MPI_SOURCE] = std::chrono::steady_clock::now();
    }
    if (st.MPI_TAG == kTagHeartbeat) continue;
    if (st.MPI_TAG == kTagLogDone) {
      ++n_done;
    } else if (count > 0) {
      const auto level = static_cast<spdlog::level::level_enum>(buf[0]);
      log().log(level, "[rank {}] {}", st.MPI_SOURCE, std::string_view(buf.data() + 1, count - 1));
    }
  }
}

// Rank 0's MLA_* variables to every worker; each worker reports differences and adopts them.
void sync_env(MPI_Comm comm) {
  std::string joined = g_rank == 0 ? join_env(mla_env_entries(environ)) : std::string();
  auto len = static_cast<int64_t>(joined.size());
  MPI_Bcast(&len, 1, MPI_INT64_T, 0, comm);
  joined.resize(static_cast<size_t>(len));
  MPI_Bcast(joined.data(), static_cast<int>(len), MPI_CHAR, 0, comm);
  if (g_rank == 0) return;
  const std::vector<std::string> root = split_env(joined);
  for (const auto& w : env_mismatches(root, mla_env_entries(environ))) log().warn("{}", w);
  adopt_env(root);
  reset_log_level_from_env();
}

}  // namespace

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

std::unique_ptr<Comm> start(int& argc, char**& argv) {
  int provided = 0;
  check(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided), "init");
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  if (provided < MPI_THREAD_MULTIPLE) {
    if (g_rank == 0)
      std::fprintf(stderr,
                   "mla: error: the MPI library does not support MPI_THREAD_MULTIPLE (the log forwarding "
                   "and the engine call it from several threads)\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  check(MPI_Comm_dup(MPI_COMM_WORLD, &g_log_comm), "comm_dup");
  PeerId me;
  me.pid = static_cast<int32_t>(getpid());
  gethostname(me.host, sizeof me.host - 1);
  g_peers.resize(static_cast<size_t>(g_size));
  MPI_Allgather(&me, sizeof me, MPI_BYTE, g_peers.data(), sizeof me, MPI_BYTE, g_log_comm);
  g_last_seen.assign(static_cast<size_t>(g_size), std::chrono::steady_clock::now());
  if (g_size > 1) {
    if (g_rank == 0) {
      g_receiver = std::thread(receive_logs);
    } else {
      g_heartbeat = std::thread(send_heartbeats);
      auto& l = log();
      g_own_sinks = l.sinks();
      l.sinks().clear();
      l.sinks().push_back(std::make_shared<ForwardSink>());
    }
  }
  sync_env(g_log_comm);
  return std::make_unique<MpiComm>();
}

std::optional<std::string> failure() {
  if (!g_failed.load()) return std::nullopt;
  std::lock_guard lk(g_failure_mu);
  return g_failure;
}

void check_workers(double max_silence_s) {
  if (g_rank == 0 && g_size > 1) check_peers(max_silence_s);
}

void stop() {
  if (g_size > 1) {
    if (g_rank == 0) {
      g_stopping.store(true);
      if (g_receiver.joinable()) g_receiver.join();
      if (g_failed.load()) {
        // A rank is gone: MPI_Finalize could wait for it forever. End the whole job instead.
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
    } else {
      g_heartbeat_stop.store(true);
      if (g_heartbeat.joinable()) g_heartbeat.join();
      char none = 0;
      MPI_Send(&none, 0, MPI_CHAR, 0, kTagLogDone, g_log_comm);
      log().sinks() = g_own_sinks;
    }
  }
  MPI_Comm_free(&g_log_comm);
  MPI_Finalize();
}

std::string library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string v(text, len);
  return v.substr(0, v.find(','));
}

}  // namespace mla::mpi
