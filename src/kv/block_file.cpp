#include "kv/block_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>

#include "kv/tier_store.h"

namespace mla::kv {
namespace {

constexpr char kMagic[8] = {'M', 'L', 'A', 'K', 'V', 'B', 'L', 'K'};

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

// The header and size of an open file.
void read_header(int fd, BlockFileHeader& h, bool& header_read, int64_t& file_bytes) {
  struct stat st {};
  file_bytes = ::fstat(fd, &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
  header_read = read_all(fd, &h, sizeof h);
}

}  // namespace

int64_t BlockFileSpec::file_bytes() const {
  return static_cast<int64_t>(sizeof(BlockFileHeader)) + int64_t{block_size} * 4 + payload_bytes;
}

std::string block_file_name(uint64_t hash) { return fmt::format("{:016x}.blk", hash); }

bool parse_block_file_name(const std::string& name, uint64_t& hash) {
  if (name.size() != 16 + 4 || !name.ends_with(".blk")) return false;
  hash = 0;
  for (char c : name.substr(0, 16)) {
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    hash = hash << 4 | static_cast<uint64_t>(d);
  }
  return true;
}

std::string block_file_problem(const BlockFileHeader& h, bool header_read, int64_t file_bytes,
                               const BlockFileSpec& spec, uint64_t hash) {
  if (!header_read || std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) return "not a block file";
  if (h.version != kBlockFileVersion)
    return fmt::format("format version {}, expected {}", h.version, kBlockFileVersion);
  if (h.fingerprint != spec.fingerprint)
    return fmt::format("another model's or layout's block (fingerprint {:016x})", h.fingerprint);
  if (h.hash != hash) return "its header names another block";
  if (h.n_tokens != static_cast<uint32_t>(spec.block_size) ||
      static_cast<int64_t>(h.payload_bytes) != spec.payload_bytes)
    return "block geometry differs";
  if (file_bytes != spec.file_bytes())
    return fmt::format("{} bytes, expected {}: truncated", file_bytes, spec.file_bytes());
  return "";
}

uint64_t block_checksum(std::span<const int32_t> tokens, std::span<const uint8_t> payload) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, tokens.data(), tokens.size_bytes());
  XXH3_64bits_update(st, payload.data(), payload.size());
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

bool read_block_file_header(const std::string& path, BlockFileHeader& h, bool& header_read, int64_t& file_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  read_header(fd, h, header_read, file_bytes);
  ::close(fd);
  return true;
}

std::string read_block_file(const std::string& path, const BlockFileSpec& spec, uint64_t hash, TierBlock& out,
                            bool& gone, int64_t& bytes_read) {
  gone = false;
  bytes_read = 0;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    gone = true;
    return "cannot open it";
  }
  BlockFileHeader h{};
  bool header_read = false;
  int64_t file_bytes = 0;
  read_header(fd, h, header_read, file_bytes);
  std::string why = block_file_problem(h, header_read, file_bytes, spec, hash);
  if (why.empty()) {
    out.tokens.resize(h.n_tokens);
    out.payload.resize(h.payload_bytes);
    if (!read_all(fd, out.tokens.data(), out.tokens.size() * sizeof(int32_t)) ||
        !read_all(fd, out.payload.data(), out.payload.size()))
      why = "truncated while reading";
  }
  ::close(fd);
  if (!why.empty()) return why;
  bytes_read = file_bytes;
  if (block_checksum(out.tokens, out.payload) != h.checksum) return "checksum mismatch";
  out.hash = hash;
  out.parent_hash = h.parent_hash;
  return "";
}

std::string write_block_file(const std::string& dir, const BlockFileSpec& spec, const TierBlock& b,
                             int64_t& file_bytes) {
  BlockFileHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kBlockFileVersion;
  h.n_tokens = static_cast<uint32_t>(b.tokens.size());
  h.fingerprint = spec.fingerprint;
  h.hash = b.hash;
  h.parent_hash = b.parent_hash;
  h.payload_bytes = b.payload.size();
  h.checksum = block_checksum(b.tokens, b.payload);
  const std::string path = dir + "/" + block_file_name(b.hash);
  const std::string tmp = dir + "/" + fmt::format("{:016x}.tmp", b.hash);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fmt::format("cannot create {}: {}", tmp, std::strerror(errno));
  const bool ok = write_all(fd, &h, sizeof h) && write_all(fd, b.tokens.data(), b.tokens.size() * sizeof(int32_t)) &&
                  write_all(fd, b.payload.data(), b.payload.size());
  const int err = errno;
  if (::close(fd) != 0 || !ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string why = fmt::format("cannot write {}: {}", path, std::strerror(ok ? errno : err));
    ::unlink(tmp.c_str());
    return why;
  }
  file_bytes = static_cast<int64_t>(sizeof h + b.tokens.size() * sizeof(int32_t) + b.payload.size());
  return "";
}

}  // namespace mla::kv
