#include "engine/mask_worker.h"

#include <exception>

#include "grammar/grammar.h"

namespace mla {

MaskWorker::~MaskWorker() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void MaskWorker::run(std::span<MaskJob> jobs) {
  for (MaskJob& j : jobs) {
    try {
      j.constrained = j.matcher->fill_mask(j.mask);
      j.error.clear();
    } catch (const std::exception& e) {
      j.constrained = false;
      j.error = e.what();
    }
  }
}

void MaskWorker::submit(std::span<MaskJob> jobs) {
  if (jobs.empty()) return;
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  {
    std::lock_guard lk(mu_);
    jobs_ = jobs;
    pending_ = true;
  }
  cv_.notify_all();
}

void MaskWorker::wait() {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return !pending_; });
}

void MaskWorker::loop() {
  std::unique_lock lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || pending_; });
    if (stop_) return;
    std::span<MaskJob> jobs = jobs_;
    lk.unlock();
    run(jobs);
    lk.lock();
    pending_ = false;
    cv_.notify_all();
  }
}

}  // namespace mla
