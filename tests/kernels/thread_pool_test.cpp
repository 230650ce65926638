#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "kernels/thread_pool.h"

namespace mla {
namespace {

TEST(ThreadPool, StaticChunksCoverRangeOnce) {
  for (int64_t n : {0, 1, 5, 64, 1001})
    for (int parts : {1, 2, 3, 8}) {
      int64_t next = 0;
      for (int p = 0; p < parts; ++p) {
        auto [b, e] = static_chunk(n, parts, p);
        EXPECT_EQ(b, next);
        EXPECT_LE(e - b, n / parts + 1);
        next = e;
      }
      EXPECT_EQ(next, n);
    }
}

TEST(ThreadPool, ParallelForVisitsEveryIndexOnceOnItsStaticThread) {
  ThreadPool pool(4);
  for (int round = 0; round < 50; ++round) {
    std::vector<int> owner(103, -1);
    pool.parallel_for(103, [&](int64_t b, int64_t e, int t) {
      for (int64_t i = b; i < e; ++i) owner[i] = t;
    });
    for (int64_t i = 0; i < 103; ++i) {
      int expect = -1;
      for (int t = 0; t < 4; ++t) {
        auto [b, e] = static_chunk(103, 4, t);
        if (i >= b && i < e) expect = t;
      }
      ASSERT_EQ(owner[i], expect);
    }
  }
}

TEST(ThreadPool, RunReachesEveryThread) {
  ThreadPool pool(3);
  std::atomic<int> mask{0};
  pool.run([&](int t) { mask |= 1 << t; });
  EXPECT_EQ(mask.load(), 7);
  ThreadPool single(1);
  int calls = 0;
  single.run([&](int t) { calls += 1 + t; });
  EXPECT_EQ(calls, 1);
}

// Back-to-back jobs (workers still spinning) and jobs after a pause (workers asleep in the futex
// wait), with the calling thread's part both shorter and longer than the workers': every job
// runs exactly once on every thread and run() returns only after all of them finished.
TEST(ThreadPool, HandOffSurvivesSpinningAndSleepingWorkers) {
  for (int n_threads : {2, 3, 5}) {
    ThreadPool pool(n_threads);
    std::vector<int64_t> seen(n_threads, 0);
    for (int round = 0; round < 3000; ++round) {
      if (round % 1000 == 999) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      const bool slow_main = round % 2 == 0;
      pool.run([&](int t) {
        if ((t == 0) == slow_main) std::this_thread::sleep_for(std::chrono::microseconds(round % 7 == 0 ? 200 : 0));
        seen[t] += round;
      });
      for (int t = 0; t < n_threads; ++t) ASSERT_EQ(seen[t], int64_t{round} * (round + 1) / 2) << "thread " << t;
    }
  }
}

}  // namespace
}  // namespace mla
