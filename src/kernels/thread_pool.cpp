#include "kernels/thread_pool.h"

namespace mla {
namespace {

// About 20-80 microseconds of pause instructions, depending on the CPU's pause latency.
constexpr int kSpinIterations = 2000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  workers_.reserve(n_threads_ - 1);
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run(const std::function<void(int)>& fn) {
  if (n_threads_ == 1) {
    fn(0);
    return;
  }
  regions_.fetch_add(1, std::memory_order_relaxed);
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1);  // seq_cst: ordered against the sleepers_ load below
  if (sleepers_.load() > 0) generation_.notify_all();
  fn(0);
  for (int i = 0; i < kSpinIterations && pending_.load(std::memory_order_acquire) != 0; ++i) cpu_relax();
  if (pending_.load(std::memory_order_acquire) != 0) {
    main_waiting_.store(true);
    for (int p; (p = pending_.load()) != 0;) pending_.wait(p);
    main_waiting_.store(false);
  }
  job_ = nullptr;
}

void ThreadPool::worker(int index) {
  uint32_t seen = 0;
  for (;;) {
    for (int i = 0; i < kSpinIterations && generation_.load(std::memory_order_acquire) == seen; ++i) cpu_relax();
    if (generation_.load(std::memory_order_acquire) == seen) {
      sleepers_.fetch_add(1);  // seq_cst: run() either sees a sleeper or we see its new generation
      while (generation_.load() == seen) generation_.wait(seen);
      sleepers_.fetch_sub(1);
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    (*job_)(index);
    if (pending_.fetch_sub(1) == 1 && main_waiting_.load()) pending_.notify_one();
  }
}

}  // namespace mla
