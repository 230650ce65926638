#pragma once
// Start-up progress: a one-line bar redrawn in place on a terminal, plain log lines (every 10%)
// when stderr is not a terminal, so logs stay readable in files and CI.
#include <chrono>
#include <cstdint>
#include <string>

namespace mla {

class Progress {
 public:
  // total: units of work (bytes here); what: "loading model.gguf". unit_bytes: show sizes in GiB.
  Progress(std::string what, int64_t total, bool unit_bytes = true);
  ~Progress();  // finish() if not done
  void update(int64_t done);
  void finish();

 private:
  std::string what_;
  int64_t total_, done_ = 0;
  bool bytes_, tty_, finished_ = false;
  int last_decile_ = -1;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// Reads a file front to back (into the page cache, so serving does not stall on page faults
// later), showing progress. Throws mla::Error when it cannot be read.
void prefetch_file(const std::string& path, const std::string& what);

}  // namespace mla
