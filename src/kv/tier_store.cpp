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

// A block file: this header, then n_tokens int32 token ids, then payload_bytes of rows. checksum is
// XXH3-64 of the tokens and payload together. Host byte order (a cache directory is a machine's).
constexpr char kMagic[8] = {'M', 'L', 'A', 'K', 'V', 'B', 'L', 'K'};
constexpr uint32_t kFormatVersion = 1;
struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t n_tokens;
  uint64_t fingerprint;
  uint64_t hash;
  uint64_t parent_hash;
  uint64_t payload_bytes;
  uint64_t checksum;
};
static_assert(sizeof(FileHeader) == 56);

uint64_t block_checksum(std::span<const int32_t> tokens, std::span<const uint8_t> payload) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, tokens.data(), tokens.size_bytes());
  XXH3_64bits_update(st, payload.data(), payload.size());
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

std::string hex16(uint64_t v) { return fmt::format("{:016x}", v); }

bool parse_hex16(const std::string& s, uint64_t& v) {
  if (s.size() != 16) return false;
  v = 0;
  for (char c : s) {
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  return true;
}

// Reads exactly n bytes (false on a short read or an error).
bool read_all(int fd, void* dst, size_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool write_all(int fd, const void* src, size_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = ENOSPC;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

uint64_t tier_fingerprint(uint64_t model_identity, const LatentShape& shape, GgmlType dtype, int block_size) {
  std::vector<uint64_t> v = {kFormatVersion,
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
    : opts_(opts), fingerprint_(fingerprint), block_size_(block_size), payload_bytes_(payload_bytes) {
  if (opts_.dir.empty()) return;
  dir_ = (fs::path(opts_.dir) / hex16(fingerprint_)).string();
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

std::string TierStore::file_path(uint64_t hash) const { return dir_ + "/" + hex16(hash) + ".blk"; }

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
  const int64_t want_bytes = static_cast<int64_t>(sizeof(FileHeader)) + int64_t{block_size_} * 4 + payload_bytes_;
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
    if (!parse_hex16(name.substr(0, name.size() - 4), hash)) {
      reject(path, "not a block file name");
      continue;
    }
    std::error_code fec;
    const auto size = static_cast<int64_t>(e.file_size(fec));
    FileHeader h{};
    bool header_ok = false;
    if (int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
      header_ok = read_all(fd, &h, sizeof h);
      ::close(fd);
    }
    std::string why;
    if (!header_ok || std::memcmp(h.magic, kMagic, sizeof kMagic) != 0)
      why = "not a block file";
    else if (h.version != kFormatVersion)
      why = fmt::format("format version {}, expected {}", h.version, kFormatVersion);
    else if (h.fingerprint != fingerprint_)
      why = fmt::format("another model's or layout's block (fingerprint {:016x})", h.fingerprint);
    else if (h.hash != hash)
      why = "its header names another block";
    else if (h.n_tokens != static_cast<uint32_t>(block_size_) ||
             static_cast<int64_t>(h.payload_bytes) != payload_bytes_)
      why = "block geometry differs";
    else if (fec || size != want_bytes)
      why = fmt::format("{} bytes, expected {}: truncated", size, want_bytes);
    if (!why.empty()) {
      reject(path, why);
      continue;
    }
    found.push_back({hash, size, e.last_write_time(fec)});
  }
  if (ec) log().warn("kv cache dir: cannot list '{}': {}", dir_, ec.message());
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
  std::vector<std::string> victims;
  {
    std::lock_guard lk(disk_mu_);
    for (const Found& f : found) {
      disk_lru_.push_back(f.hash);
      disk_[f.hash] = {f.bytes, std::prev(disk_lru_.end())};
      disk_used_ += f.bytes;
    }
    disk_evict_locked(victims);
    n_.disk_used.store(disk_used_, std::memory_order_relaxed);
  }
  for (const auto& v : victims) ::unlink(v.c_str());
  log().info("kv cache dir: {} holds {} blocks ({:.1f} MiB) for this model and cache layout", dir_, disk_.size(),
             static_cast<double>(disk_used_) / 1048576.0);
}

void TierStore::disk_evict_locked(std::vector<std::string>& victims) {
  if (opts_.disk_bytes <= 0) return;
  while (disk_used_ > opts_.disk_bytes && !disk_lru_.empty()) {
    const uint64_t h = disk_lru_.front();
    disk_lru_.pop_front();
    auto it = disk_.find(h);
    disk_used_ -= it->second.file_bytes;
    disk_.erase(it);
    victims.push_back(file_path(h));
  }
}

bool TierStore::contains(uint64_t hash) const {
  if (host_.count(hash)) return true;
  if (!disk_on_) return false;
  std::lock_guard lk(disk_mu_);
  return disk_.count(hash) || queued_.count(hash);
}

void TierStore::host_insert(TierBlockPtr block) {
  const int64_t bytes = static_cast<int64_t>(block->payload.size() + block->tokens.size() * sizeof(int32_t));
  if (bytes > opts_.host_bytes || host_.count(block->hash)) return;
  while (host_used_ + bytes > opts_.host_bytes) {
    auto it = host_.find(host_lru_.front());
    host_used_ -= static_cast<int64_t>(it->second.block->payload.size() + it->second.block->tokens.size() * 4);
    host_.erase(it);
    host_lru_.pop_front();
  }
  const uint64_t hash = block->hash;
  host_lru_.push_back(hash);
  host_[hash] = {std::move(block), std::prev(host_lru_.end())};
  host_used_ += bytes;
  n_.host_used.store(host_used_, std::memory_order_relaxed);
}

TierBlockPtr TierStore::fetch(uint64_t hash, uint64_t parent_hash, std::span<const int32_t> tokens, int* tier_out) {
  if (opts_.host_bytes > 0) {
    auto it = host_.find(hash);
    if (it != host_.end() && it->second.block->parent_hash == parent_hash &&
        std::equal(tokens.begin(), tokens.end(), it->second.block->tokens.begin(), it->second.block->tokens.end())) {
      host_lru_.splice(host_lru_.end(), host_lru_, it->second.lru);
      n_.hits[0].fetch_add(1, std::memory_order_relaxed);
      if (tier_out) *tier_out = 1;
      return it->second.block;
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

TierBlockPtr TierStore::disk_read(uint64_t hash, uint64_t parent_hash, std::span<const int32_t> tokens) {
  {
    std::lock_guard lk(disk_mu_);
    if (!disk_.count(hash)) return nullptr;
  }
  const std::string path = file_path(hash);
  auto drop = [&](const std::string& why) -> TierBlockPtr {
    {
      std::lock_guard lk(disk_mu_);
      if (auto it = disk_.find(hash); it != disk_.end()) {
        disk_used_ -= it->second.file_bytes;
        disk_lru_.erase(it->second.lru);
        disk_.erase(it);
        n_.disk_used.store(disk_used_, std::memory_order_relaxed);
      }
    }
    if (!why.empty()) reject(path, why);
    return nullptr;
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return drop("");  // gone (deleted by hand); nothing to warn about
  FileHeader h{};
  auto blk = std::make_shared<TierBlock>();
  bool ok = read_all(fd, &h, sizeof h) && std::memcmp(h.magic, kMagic, sizeof kMagic) == 0 &&
            h.version == kFormatVersion && h.fingerprint == fingerprint_ && h.hash == hash &&
            h.n_tokens == static_cast<uint32_t>(block_size_) && static_cast<int64_t>(h.payload_bytes) == payload_bytes_;
  if (ok) {
    blk->tokens.resize(h.n_tokens);
    blk->payload.resize(h.payload_bytes);
    ok = read_all(fd, blk->tokens.data(), blk->tokens.size() * sizeof(int32_t)) &&
         read_all(fd, blk->payload.data(), blk->payload.size());
    uint8_t extra = 0;
    ok = ok && ::read(fd, &extra, 1) == 0;  // nothing after the payload
  }
  ::close(fd);
  if (!ok) return drop("bad header or truncated");
  n_.bytes_read.fetch_add(static_cast<int64_t>(sizeof h + blk->tokens.size() * 4 + blk->payload.size()),
                          std::memory_order_relaxed);
  if (block_checksum(blk->tokens, blk->payload) != h.checksum) return drop("checksum mismatch");
  // A different prefix under the same 64-bit hash: a miss, and the file stays (it is right for its own prefix).
  if (h.parent_hash != parent_hash || !std::equal(tokens.begin(), tokens.end(), blk->tokens.begin(), blk->tokens.end()))
    return nullptr;
  blk->hash = hash;
  blk->parent_hash = h.parent_hash;
  {
    std::lock_guard lk(disk_mu_);
    if (auto it = disk_.find(hash); it != disk_.end()) disk_lru_.splice(disk_lru_.end(), disk_lru_, it->second.lru);
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

bool TierStore::write_file(const TierBlock& b, int64_t& file_bytes) {
  FileHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kFormatVersion;
  h.n_tokens = static_cast<uint32_t>(b.tokens.size());
  h.fingerprint = fingerprint_;
  h.hash = b.hash;
  h.parent_hash = b.parent_hash;
  h.payload_bytes = b.payload.size();
  h.checksum = block_checksum(b.tokens, b.payload);
  const std::string path = file_path(b.hash);
  const std::string tmp = dir_ + "/" + hex16(b.hash) + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    warn_write_error(fmt::format("cannot create {}: {}", tmp, std::strerror(errno)));
    return false;
  }
  const bool ok = write_all(fd, &h, sizeof h) && write_all(fd, b.tokens.data(), b.tokens.size() * sizeof(int32_t)) &&
                  write_all(fd, b.payload.data(), b.payload.size());
  const int err = errno;
  if (::close(fd) != 0 || !ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    warn_write_error(fmt::format("cannot write {}: {}", path, std::strerror(ok ? errno : err)));
    ::unlink(tmp.c_str());
    return false;
  }
  file_bytes = static_cast<int64_t>(sizeof h + b.tokens.size() * sizeof(int32_t) + b.payload.size());
  return true;
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
    const bool ok = write_file(*b, bytes);
    std::vector<std::string> victims;
    lk.lock();
    if (--queued_[b->hash] == 0) queued_.erase(b->hash);
    if (ok && !disk_.count(b->hash)) {
      disk_lru_.push_back(b->hash);
      disk_[b->hash] = {bytes, std::prev(disk_lru_.end())};
      disk_used_ += bytes;
      disk_evict_locked(victims);
      n_.disk_used.store(disk_used_, std::memory_order_relaxed);
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
      if (host_.count(c.hash)) continue;  // engine thread: tier 1 is ours to look at
      if (!disk_.count(c.hash)) break;
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
  auto it = prefetched_.find(hash);
  if (it == prefetched_.end()) return nullptr;
  const TierBlock& got = *it->second.first;
  if (got.parent_hash != parent_hash || !std::equal(tokens.begin(), tokens.end(), got.tokens.begin(), got.tokens.end()))
    return nullptr;
  TierBlockPtr b = std::move(it->second.first);
  prefetched_order_.erase(it->second.second);
  prefetched_.erase(it);
  prefetched_bytes_ -= static_cast<int64_t>(b->payload.size());
  return b;
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
      if (prefetched_.count(c.hash)) continue;
      lk.unlock();
      TierBlockPtr b = disk_read(c.hash, c.parent_hash, c.tokens);
      lk.lock();
      if (!b) break;
      if (prefetched_.count(c.hash)) continue;
      prefetched_bytes_ += static_cast<int64_t>(b->payload.size());
      prefetched_order_.push_back(c.hash);
      prefetched_.emplace(c.hash, std::make_pair(std::move(b), std::prev(prefetched_order_.end())));
      while (prefetched_bytes_ > opts_.prefetch_bytes) {
        auto old = prefetched_.find(prefetched_order_.front());
        prefetched_order_.pop_front();
        prefetched_bytes_ -= static_cast<int64_t>(old->second.first->payload.size());
        prefetched_.erase(old);
      }
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
