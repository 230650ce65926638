#pragma once
// The disk tier's block file (kv/tier_store.h): a header, then n_tokens int32 token ids, then
// payload_bytes of rows. The checksum is XXH3-64 of the tokens and payload together. Host byte
// order (a cache directory is a machine's). The file of block `hash` is <hash as 16 hex digits>.blk,
// written as .tmp and renamed.
#include <cstdint>
#include <span>
#include <string>

namespace mla::kv {

struct TierBlock;

// What every block file of one store must say: its fingerprint and block geometry.
struct BlockFileSpec {
  uint64_t fingerprint = 0;
  int block_size = 0;         // tokens per block
  int64_t payload_bytes = 0;  // LatentCache::block_bytes()
  int64_t file_bytes() const;
};

struct BlockFileHeader {
  char magic[8];
  uint32_t version;
  uint32_t n_tokens;
  uint64_t fingerprint;
  uint64_t hash;
  uint64_t parent_hash;
  uint64_t payload_bytes;
  uint64_t checksum;
};
static_assert(sizeof(BlockFileHeader) == 56);

// The on-disk format's version, part of tier_fingerprint.
inline constexpr uint32_t kBlockFileVersion = 1;

std::string block_file_name(uint64_t hash);  // "<16 hex digits>.blk"
// The hash a block file's name stands for; false when the name is not <16 lower-case hex>.blk.
bool parse_block_file_name(const std::string& name, uint64_t& hash);

// Why a block file whose header is h (header_read false: it could not be read) and whose size is
// file_bytes is not block `hash` of this spec; "" when it is. The one validity check of the
// format: the directory scan and every read use it.
std::string block_file_problem(const BlockFileHeader& h, bool header_read, int64_t file_bytes,
                               const BlockFileSpec& spec, uint64_t hash);

uint64_t block_checksum(std::span<const int32_t> tokens, std::span<const uint8_t> payload);

// Reads the header and size of the file at path; false when it cannot be opened.
bool read_block_file_header(const std::string& path, BlockFileHeader& h, bool& header_read, int64_t& file_bytes);

// Reads block `hash` from path into out (tokens, payload, parent_hash): "" on success, else why
// it is unusable (block_file_problem's reasons, a short read, a checksum mismatch). gone is set
// when the file does not exist (deleted by hand: nothing to warn about); bytes_read is the file's
// size once it was read whole (a checksum mismatch included), else 0.
std::string read_block_file(const std::string& path, const BlockFileSpec& spec, uint64_t hash, TierBlock& out,
                            bool& gone, int64_t& bytes_read);

// Writes b to dir/<name>.tmp, then renames it to dir/<name>.blk; "" on success (file_bytes set),
// else the error (the temporary file removed).
std::string write_block_file(const std::string& dir, const BlockFileSpec& spec, const TierBlock& b,
                             int64_t& file_bytes);

}  // namespace mla::kv
