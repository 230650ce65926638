#pragma once
// Fills the grammar token masks of a step's constrained sequences on a worker thread while the
// model's forward pass runs on the kernel thread pool, so a constrained sequence waits for its
// mask only when the mask takes longer than the forward. The thread starts on the first submit:
// an engine that never sees a grammar never has one.
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace mla {

class GrammarMatcher;

struct MaskJob {
  GrammarMatcher* matcher = nullptr;
  std::span<uint32_t> mask;  // token_mask_words(n_vocab) words, written by the worker
  // Results, valid after wait():
  bool constrained = false;  // false: every token is allowed (the mask need not be applied)
  std::string error;         // what fill_mask threw, or ""
};

class MaskWorker {
 public:
  MaskWorker() = default;
  ~MaskWorker();
  MaskWorker(const MaskWorker&) = delete;
  MaskWorker& operator=(const MaskWorker&) = delete;

  // Starts filling every job's mask and returns at once. The jobs (and their matchers and
  // masks) must stay untouched until wait() returns.
  void submit(std::span<MaskJob> jobs);
  // Blocks until the submitted jobs are done. No-op when nothing was submitted.
  void wait();

  // Fills the jobs on the calling thread (what the worker runs; also for tests).
  static void run(std::span<MaskJob> jobs);

 private:
  void loop();

  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::span<MaskJob> jobs_;
  bool pending_ = false;  // submitted, not yet finished
  bool stop_ = false;
};

}  // namespace mla
