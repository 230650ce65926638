#include "util/progress.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "util/error.h"
#include "util/log.h"

namespace mla {

namespace {

std::string amount(int64_t v, bool bytes) {
  if (!bytes) return std::to_string(v);
  return fmt::format("{:.2f} GiB", static_cast<double>(v) / (1024.0 * 1024.0 * 1024.0));
}

}  // namespace

Progress::Progress(std::string what, int64_t total, bool unit_bytes)
    : what_(std::move(what)),
      total_(std::max<int64_t>(total, 1)),
      bytes_(unit_bytes),
      tty_(isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

Progress::~Progress() { finish(); }

void Progress::update(int64_t done) {
  if (finished_) return;
  done_ = std::min(done, total_);
  const auto now = std::chrono::steady_clock::now();
  const double frac = static_cast<double>(done_) / static_cast<double>(total_);
  const double secs = std::chrono::duration<double>(now - start_).count();
  if (tty_) {
    if (now - last_draw_ < std::chrono::milliseconds(100) && done_ < total_) return;
    last_draw_ = now;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(frac * kWidth);
    std::string bar(static_cast<size_t>(filled), '=');
    if (filled < kWidth) bar += '>' + std::string(static_cast<size_t>(kWidth - filled - 1), ' ');
    std::fprintf(stderr, "\r%s [%s] %3d%% %s / %s %.1f s", what_.c_str(), bar.c_str(), static_cast<int>(frac * 100),
                 amount(done_, bytes_).c_str(), amount(total_, bytes_).c_str(), secs);
    std::fflush(stderr);
  } else {
    const int decile = static_cast<int>(frac * 10);
    if (decile == last_decile_) return;
    last_decile_ = decile;
    log().info("{}: {}% ({} of {}, {:.1f} s)", what_, decile * 10, amount(done_, bytes_), amount(total_, bytes_), secs);
  }
}

void Progress::finish() {
  if (finished_) return;
  update(total_);
  finished_ = true;
  if (tty_) std::fprintf(stderr, "\n");
}

void prefetch_file(const std::string& path, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open '{}': {}", path, std::strerror(errno));
  const off_t size = ::lseek(fd, 0, SEEK_END);
  ::lseek(fd, 0, SEEK_SET);
#ifdef POSIX_FADV_SEQUENTIAL
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
  Progress bar(what, size);
  std::vector<char> buf(8 << 20);
  int64_t done = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      fail("cannot read '{}' at byte {}: {}", path, done, std::strerror(err));
    }
    if (n == 0) break;
    done += n;
    bar.update(done);
  }
  ::close(fd);
  bar.finish();
}

}  // namespace mla
