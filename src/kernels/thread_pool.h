#pragma once
// A small fixed-size thread pool for the forward pass.
//
// Work is always split by a deterministic static partition: parallel_for(n) hands thread i the
// contiguous range static_chunk(n, n_threads, i). Kernels partition *output* rows or heads this
// way and never split one dot product's reduction across threads, so every result is
// bit-identical whatever the thread count or the rest of the batch.
#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

namespace mla {

// [begin, end) of part `part` when [0, n) is cut into n_parts near-equal contiguous pieces.
inline std::pair<int64_t, int64_t> static_chunk(int64_t n, int n_parts, int part) {
  int64_t base = n / n_parts, extra = n % n_parts;
  int64_t begin = part * base + (part < extra ? part : extra);
  return {begin, begin + base + (part < extra ? 1 : 0)};
}

class ThreadPool {
 public:
  // n_threads counts the calling thread (thread 0); n_threads <= 1 runs everything inline.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }
  // Parallel regions run so far (run() calls with more than one thread: each is one hand-off to
  // the workers and one wait for the last of them), for `mla bench --profile`.
  int64_t regions() const { return regions_.load(std::memory_order_relaxed); }

  // Runs fn(thread_index) once on every thread and returns when all have finished. Not
  // reentrant: fn must not call run() again.
  void run(const std::function<void(int)>& fn);

  // fn(begin, end, thread_index) over the static partition of [0, n); empty parts are skipped.
  template <typename F>
  void parallel_for(int64_t n, F&& fn) {
    if (n <= 0) return;
    if (n_threads_ == 1 || n == 1) {
      fn(int64_t{0}, n, 0);
      return;
    }
    run([&](int t) {
      auto [b, e] = static_chunk(n, n_threads_, t);
      if (b < e) fn(b, e, t);
    });
  }

 private:
  void worker(int index);

  // Hand-off without locks: run() publishes job_ by bumping generation_ and waits for pending_
  // to reach 0. Both sides spin briefly first (back-to-back kernels of one forward pass are
  // microseconds apart) and then sleep in a futex wait (std::atomic::wait); the other side calls
  // notify only when someone may be asleep, so a busy forward pass makes no system calls.
  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* job_ = nullptr;  // written before generation_ is bumped
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> pending_{0};            // workers still running the current job
  std::atomic<int> sleepers_{0};           // workers in generation_.wait
  std::atomic<bool> main_waiting_{false};  // run() in pending_.wait
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> regions_{0};
};

}  // namespace mla
