#include "kv/tier_store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "util/log.h"

namespace mla::kv {
namespace {

namespace fs = std::filesystem;

int64_t host_bytes_of(const TierBlock& b) {
  return static_cast<int64_t>(b.payload.size() + b.tokens.size() * sizeof(int32_t));
}

}  // namespace

uint64_t tier_fingerprint(uint64_t model_identity, const LatentShape& shape, GgmlType dtype, int block_size) {
  std::vector<uint64_t> v = {kBlockFileVersion,
                             model_identity,
                             static_cast<uint64_t>(shape.n_layer),
                             static_cast<uint64_t>(shape.kv_lora_rank),
                             static_cast<uint64_t>(shape.qk_rope_head_dim),
                             static_cast<uint64_t>(dtype),
                             static_cast<uint64_t>(block_size),
                             shape.index_key_dims.size()};
  for (int d : shape.index_key_dims) v.push_back(static_cast<uint64_t>(d));
  return XXH3_64bits(v.data(), v.size() * sizeof(uint64_t));
}

TierStore::TierStore(const TierOptions& opts, uint64_t fingerprint, int block_size, int64_t payload_bytes)
    : opts_(opts),
      fingerprint_(fingerprint),
      block_size_(block_size),
      payload_bytes_(payload_bytes),
      file_spec_{fingerprint, block_size, payload_bytes} {
  if (opts_.dir.empty()) return;
  dir_ = (fs::path(opts_.dir) / fmt::format("{:016x}", fingerprint_)).string();
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_, ec)) {
    log().warn("kv cache dir: cannot use '{}' ({}); blocks stay in memory only", dir_,
               ec ? ec.message() : "not a directory");
    dir_.clear();
    return;
  }
  disk_on_ = true;
  scan_dir();
  reader_ = std::thread([this] { reader_loop(); });
  if (::access(dir_.c_str(), W_OK) != 0) {
    log().warn("kv cache dir: '{}' is not writable ({}); its {} blocks are read, no new ones are written", dir_,
               std::strerror(errno), disk_.size());
    write_warned_ = true;
    return;  // no writer
  }
  writer_ = std::thread([this] { writer_loop(); });
}

TierStore::~TierStore() {
  {
    std::lock_guard lk(prefetch_mu_);
    prefetch_stop_ = true;
  }
  prefetch_cv_.notify_all();
  if (reader_.joinable()) reader_.join();
  {
    std::lock_guard lk(disk_mu_);
    stop_ = true;
  }
  queue_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

std::string TierStore::file_path(uint64_t hash) const { return dir_ + "/" + block_file_name(hash); }

void TierStore::reject(const std::string& path, const std::string& why) {
  std::error_code ec;
  fs::remove(path, ec);
  n_.files_rejected.fetch_add(1, std::memory_order_relaxed);
  log().warn("kv cache dir: skipped {} ({}){}", path, why,
             ec ? fmt::format("; cannot delete it: {}", ec.message()) : "");
}

void TierStore::scan_dir() {
  struct Found {
    uint64_t hash;
    int64_t bytes;
    fs::file_time_type mtime;
  };
  std::vector<Found> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string path = e.path().string();
    const std::string name = e.path().filename().string();
    if (name.ends_with(".tmp")) {
      reject(path, "a write that did not finish");
      continue;
    }
    if (!name.ends_with(".blk")) continue;  // not ours
    uint64_t hash = 0;
    if (!parse_block_file_name(name, hash)) {
      reject(path, "not a block file name");
      continue;
    }
    BlockFileHeader h{};
    bool header_read = false;
    int64_t size = -1;
    read_block_file_header(path, h, header_read, size);
    if (const std::string why = block_file_problem(h, header_read, size, file_spec_, hash); !why.empty()) {
      reject(path, why);
      continue;
    }
    std::error_code fec;
    found.push_back({hash, size, e.last_write_time(fec)});
  }
  if (ec) log().warn("kv cache dir: cannot list '{}': {}", dir_, ec.message());
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
  std::vector<std::string> victims;
  {
    std::lock_guard lk(disk_mu_);
    for (const Found& f : found) disk_.insert(f.hash, {}, f.bytes);
    disk_evict_locked(victims);
    n_.disk_used.store(disk_.bytes(), std::memory_order_relaxed);
  }
  for (const auto& v : victims) ::unlink(v.c_str());
  log().info("kv cache dir: {} holds {} blocks ({:.1f} MiB) for this model and cache layout", dir_, disk_.size(),
             static_cast<double>(disk_.bytes()) / 1048576.0);
}

void TierStore::disk_evict_locked(std::vector<std::string>& victims) {
  if (opts_.disk_bytes <= 0) return;
  disk_.evict_to(opts_.disk_bytes, [&](uint64_t h, std::monostate) { victims.push_back(file_path(h)); });
}

bool TierStore::contains(uint64_t hash) const {
  if (host_.contains(hash)) return true;
  if (!disk_on_) return false;
  std::lock_guard lk(disk_mu_);
  return disk_.contains(hash) || queued_.count(hash);
}

void TierStore::host_insert(TierBlockPtr block) {
  const int64_t bytes = host_bytes_of(*block);
  if (bytes > opts_.host_bytes || host_.contains(block->hash)) return;
  host_.evict_to(opts_.host_bytes - bytes);
  const uint64_t hash = block->hash;
  host_.insert(hash, std::move(block), bytes);
  n_.host_used.store(host_.bytes(), std::memory_order_relaxed);
}

TierBlockPtr TierStore::fetch(uint64_t hash, uint64_t parent_hash, std::span<const int32_t> tokens, int* tier_out) {
  if (opts_.host_bytes > 0) {
    const TierBlockPtr* held = host_.find(hash);
    if (held && (*held)->parent_hash == parent_hash &&
        std::equal(tokens.begin(), tokens.end(), (*held)->tokens.begin(), (*held)->tokens.end())) {
      host_.touch(hash);
      n_.hits[0].fetch_add(1, std::memory_order_relaxed);
      if (tier_out) *tier_out = 1;
      return *held;
    }
    n_.misses[0].fetch_add(1, std::memory_order_relaxed);
  }
  if (!disk_on_) return nullptr;
  TierBlockPtr b = take_prefetched(hash, parent_hash, tokens);
  if (!b) b = disk_read(hash, parent_hash, tokens);
  if (!b) {
    n_.misses[1].fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  n_.hits[1].fetch_add(1, std::memory_order_relaxed);
  if (tier_out) *tier_out = 2;
  if (opts_.host_bytes > 0) host_insert(b);
  return b;
}

void TierStore::disk_forget(uint64_t hash) {
  std::lock_guard lk(disk_mu_);
  if (disk_.erase(hash)) n_.disk_used.store(disk_.bytes(), std::memory_order_relaxed);
}

TierBlockPtr TierStore::disk_read(uint64_t hash, uint64_t parent_hash, std::span<const int32_t> tokens) {
  {
    std::lock_guard lk(disk_mu_);
    if (!disk_.contains(hash)) return nullptr;
  }
  const std::string path = file_path(hash);
  auto blk = std::make_shared<TierBlock>();
  bool gone = false;
  int64_t bytes_read = 0;
  const std::string why = read_block_file(path, file_spec_, hash, *blk, gone, bytes_read);
  n_.bytes_read.fetch_add(bytes_read, std::memory_order_relaxed);
  if (!why.empty()) {
    disk_forget(hash);
    if (!gone) reject(path, why);
    return nullptr;
  }
  // A different prefix under the same 64-bit hash: a miss, and the file stays (it is right for its own prefix).
  if (blk->parent_hash != parent_hash ||
      !std::equal(tokens.begin(), tokens.end(), blk->tokens.begin(), blk->tokens.end()))
    return nullptr;
  {
    std::lock_guard lk(disk_mu_);
    disk_.touch(hash);
  }
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // the LRU order a restart rebuilds from mtimes
  return blk;
}

void TierStore::put(TierBlockPtr block) {
  assert(static_cast<int>(block->tokens.size()) == block_size_ &&
         static_cast<int64_t>(block->payload.size()) == payload_bytes_);
  if (contains(block->hash)) return;
  if (opts_.host_bytes > 0) host_insert(block);
  if (!writer_.joinable()) return;
  {
    std::lock_guard lk(disk_mu_);
    if (static_cast<int>(queue_.size()) >= std::max(1, opts_.writer_queue)) {
      n_.writes_dropped.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    ++queued_[block->hash];
    queue_.push_back(std::move(block));
  }
  queue_cv_.notify_one();
}

void TierStore::flush() {
  std::unique_lock lk(disk_mu_);
  idle_cv_.wait(lk, [&] { return queue_.empty() && !writing_; });
}

void TierStore::warn_write_error(const std::string& what) {
  n_.write_errors.fetch_add(1, std::memory_order_relaxed);
  if (write_warned_) return;
  write_warned_ = true;
  log().warn("kv cache dir: {}; blocks that cannot be written are dropped (warned once)", what);
}

void TierStore::writer_loop() {
  std::unique_lock lk(disk_mu_);
  for (;;) {
    queue_cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and nothing left to write
    TierBlockPtr b = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    lk.unlock();
    int64_t bytes = 0;
    const std::string error = write_block_file(dir_, file_spec_, *b, bytes);
    const bool ok = error.empty();
    if (!ok) warn_write_error(error);
    std::vector<std::string> victims;
    lk.lock();
    if (--queued_[b->hash] == 0) queued_.erase(b->hash);
    if (ok && disk_.insert(b->hash, {}, bytes)) {
      disk_evict_locked(victims);
      n_.disk_used.store(disk_.bytes(), std::memory_order_relaxed);
      n_.bytes_written.fetch_add(bytes, std::memory_order_relaxed);
      n_.blocks_written.fetch_add(1, std::memory_order_relaxed);
    }
    writing_ = false;
    lk.unlock();
    for (const auto& v : victims) ::unlink(v.c_str());
    lk.lock();
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

void TierStore::prefetch(std::vector<ChainBlock> chain) {
  if (!disk_on_) return;
  std::vector<ChainBlock> want;
  {
    std::lock_guard lk(disk_mu_);
    for (ChainBlock& c : chain) {
      if (host_.contains(c.hash)) continue;  // engine thread: tier 1 is ours to look at
      if (!disk_.contains(c.hash)) break;
      want.push_back(std::move(c));
    }
  }
  if (want.empty()) return;
  {
    std::lock_guard lk(prefetch_mu_);
    prefetch_queue_.push_back(std::move(want));
  }
  prefetch_cv_.notify_one();
}

void TierStore::flush_prefetch() {
  std::unique_lock lk(prefetch_mu_);
  prefetch_idle_cv_.wait(lk, [&] { return prefetch_queue_.empty() && !reading_; });
}

TierBlockPtr TierStore::take_prefetched(uint64_t hash, uint64_t parent_hash, std::span<const int32_t> tokens) {
  std::lock_guard lk(prefetch_mu_);
  const TierBlockPtr* held = prefetched_.find(hash);
  if (!held) return nullptr;
  const TierBlock& got = **held;
  if (got.parent_hash != parent_hash || !std::equal(tokens.begin(), tokens.end(), got.tokens.begin(), got.tokens.end()))
    return nullptr;
  return *prefetched_.erase(hash);
}

// Reads each queued chain's blocks in order (disk_read checks them and deletes a bad file) into
// prefetched_, the oldest dropped beyond opts_.prefetch_bytes; a chain ends at its first miss.
void TierStore::reader_loop() {
  std::unique_lock lk(prefetch_mu_);
  for (;;) {
    prefetch_cv_.wait(lk, [&] { return prefetch_stop_ || !prefetch_queue_.empty(); });
    if (prefetch_stop_) return;
    std::vector<ChainBlock> chain = std::move(prefetch_queue_.front());
    prefetch_queue_.pop_front();
    reading_ = true;
    for (const ChainBlock& c : chain) {
      if (prefetch_stop_) break;
      if (prefetched_.contains(c.hash)) continue;
      lk.unlock();
      TierBlockPtr b = disk_read(c.hash, c.parent_hash, c.tokens);
      lk.lock();
      if (!b) break;
      const auto bytes = static_cast<int64_t>(b->payload.size());
      prefetched_.insert(c.hash, std::move(b), bytes);
      prefetched_.evict_to(opts_.prefetch_bytes);
    }
    reading_ = false;
    if (prefetch_queue_.empty()) prefetch_idle_cv_.notify_all();
  }
}

TierCounters TierStore::counters() const {
  TierCounters c;
  for (int t = 0; t < 2; ++t) {
    c.hits[t] = n_.hits[t].load(std::memory_order_relaxed);
    c.misses[t] = n_.misses[t].load(std::memory_order_relaxed);
  }
  c.bytes_read = n_.bytes_read.load(std::memory_order_relaxed);
  c.bytes_written = n_.bytes_written.load(std::memory_order_relaxed);
  c.blocks_written = n_.blocks_written.load(std::memory_order_relaxed);
  c.writes_dropped = n_.writes_dropped.load(std::memory_order_relaxed);
  c.write_errors = n_.write_errors.load(std::memory_order_relaxed);
  c.files_rejected = n_.files_rejected.load(std::memory_order_relaxed);
  c.host_bytes_used = n_.host_used.load(std::memory_order_relaxed);
  c.disk_bytes_used = n_.disk_used.load(std::memory_order_relaxed);
  return c;
}

}  // namespace mla::kv
