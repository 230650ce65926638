#pragma once
// The prefix cache's lower tiers: full KV blocks kept after the arena (tier 0, kv/block_pool.h)
// has given their slots to other sequences — in host RAM (tier 1, an LRU under a byte budget) and
// in a directory on disk (tier 2, an LRU under a byte cap) that outlives the process.
//
// A block is keyed by its chain hash (hash_block_tokens, the arena's key) and carries its parent's
// chain hash and its token ids, which a lookup compares too: a stored block stands for a prefix only
// when its hash, its parent's hash and its own tokens all match. Unlike the arena, which checks the
// parent block's identity, the tiers check the parent's 64-bit chain hash: wrong KV would take two
// different prefixes whose chain hashes collide before this block and the same tokens in it.
// Everything the rows depend on besides the tokens — the model file, the options that change its
// rows, the cache layout and dtype, the block size, the layers the cache holds (the MTP layer's,
// the indexer keys) — goes into one fingerprint
// (tier_fingerprint); the disk tier keeps each fingerprint's blocks in a directory of its own,
// DIR/<fingerprint as 16 hex digits>/, and checks it in every file's header, so another model's or
// another dtype's blocks are never read.
//
// Blocks enter by put() when the arena first caches them (write-through): into tier 1, and onto a
// bounded queue that one background thread writes to disk (each file under a temporary name, then
// renamed; a full queue drops the block, never waits). fetch() walks tier 1 then tier 2; a tier-2
// hit is read whole, checked (header, sizes, XXH3 checksum of tokens and payload) and promoted to
// tier 1. A file that fails a check — corrupt, truncated, another fingerprint's, a temporary left
// by a killed write — is skipped with one warning and deleted. Disk errors (a full disk, a
// read-only directory) cost the blocks they concern and one warning, never a request.
//
// Threads: put/fetch/contains run on the engine thread; the writer thread shares only the disk
// index (under a mutex) and the counters (atomics). The file format is kv/block_file.h; each
// tier's LRU is a kv/lru.h ByteLru.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

#include "kv/block_file.h"
#include "kv/latent_cache.h"
#include "kv/lru.h"
#include "util/ggml_type.h"

namespace mla::kv {

// One full block's rows as LatentCache::read_block lays them out, with the key it is stored under.
struct TierBlock {
  uint64_t hash = 0;             // hash_block_tokens(parent_hash, tokens)
  uint64_t parent_hash = 0;      // kRootHash for a sequence's first block
  std::vector<int32_t> tokens;   // block_size token ids
  std::vector<uint8_t> payload;  // LatentCache::block_bytes()
};
using TierBlockPtr = std::shared_ptr<const TierBlock>;

struct TierOptions {
  int64_t host_bytes = 0;  // tier 1 budget (payload + tokens); 0: no tier 1
  std::string dir;         // tier 2 directory; empty: no tier 2
  int64_t disk_bytes = 0;  // tier 2 cap (file bytes); 0: no cap but the disk's
  int writer_queue = 64;   // blocks waiting for the disk writer; more are dropped
  // Blocks read ahead from disk for requests that wait in the queue (prefetch), held until a
  // lookup takes them; the oldest go first beyond this.
  int64_t prefetch_bytes = int64_t{256} << 20;
  bool enabled() const { return host_bytes > 0 || !dir.empty(); }
};

// Cumulative since start, except the two *_bytes_used gauges. Tier index 0: host RAM, 1: disk.
struct TierCounters {
  int64_t hits[2] = {};       // blocks found
  int64_t misses[2] = {};     // lookups that found no block there (the walk then tries the next tier)
  int64_t bytes_read = 0;     // file bytes read back from disk
  int64_t bytes_written = 0;  // file bytes written to disk
  int64_t blocks_written = 0;
  int64_t writes_dropped = 0;  // blocks dropped because the writer's queue was full
  int64_t write_errors = 0;    // blocks not written (full disk, read-only directory, ...)
  int64_t files_rejected = 0;  // files skipped and deleted (corrupt, truncated, foreign, temporary)
  int64_t host_bytes_used = 0;
  int64_t disk_bytes_used = 0;
};

// The key every tier's blocks live under: XXH3-64 of the model identity (the caller's hash of the
// file and the options that change its rows), the cache layout (layers, kv_lora_rank,
// qk_rope_head_dim, every layer's indexer key width), the dtype, the block size and the on-disk
// format version.
uint64_t tier_fingerprint(uint64_t model_identity, const LatentShape& shape, GgmlType dtype, int block_size);

class TierStore {
 public:
  // payload_bytes: one block's LatentCache::block_bytes(). Scans opts.dir/<fingerprint>/ (creating
  // it when missing) and starts the writer; a directory that cannot be used leaves tier 2 off with
  // one warning.
  TierStore(const TierOptions& opts, uint64_t fingerprint, int block_size, int64_t payload_bytes);
  // Writes what is queued, then stops the writer.
  ~TierStore();
  TierStore(const TierStore&) = delete;
  TierStore& operator=(const TierStore&) = delete;

  uint64_t fingerprint() const { return fingerprint_; }
  int block_size() const { return block_size_; }
  int64_t payload_bytes() const { return payload_bytes_; }
  bool has_disk() const { return disk_on_; }
  std::string disk_dir() const { return dir_; }  // DIR/<fingerprint hex>, "" without tier 2

  // Whether some tier holds a block under hash (tokens not compared).
  bool contains(uint64_t hash) const;
  // The block stored for (hash, parent_hash, tokens), from tier 1 or else tier 2, or nullptr.
  // tier_out (may be nullptr): 1 or 2, where it was found.
  TierBlockPtr fetch(uint64_t hash, uint64_t parent_hash, std::span<const int32_t> tokens, int* tier_out = nullptr);
  // Keeps block in tier 1 and queues it for tier 2 (a block some tier already holds is ignored).
  void put(TierBlockPtr block);
  // Waits until the writer's queue is empty (tests, a clean stop).
  void flush();

  // Reads ahead, on a background thread, the disk tier's blocks of a prompt whose request waits
  // for its turn: chain[i] = (hash, parent hash, tokens) of its i-th block past the KV cache's
  // run. Blocks tier 1 holds are skipped; the chain ends at the first block the disk does not
  // hold. fetch() then takes a block read ahead instead of reading it (the read is checked the
  // same way; hits count when taken).
  struct ChainBlock {
    uint64_t hash = 0, parent_hash = 0;
    std::vector<int32_t> tokens;
  };
  void prefetch(std::vector<ChainBlock> chain);
  // Waits until every prefetch asked for so far is done (tests).
  void flush_prefetch();

  TierCounters counters() const;

 private:
  void host_insert(TierBlockPtr block);
  TierBlockPtr disk_read(uint64_t hash, uint64_t parent_hash, std::span<const int32_t> tokens);
  void disk_forget(uint64_t hash);
  void scan_dir();
  void writer_loop();
  void reader_loop();
  TierBlockPtr take_prefetched(uint64_t hash, uint64_t parent_hash, std::span<const int32_t> tokens);
  void disk_evict_locked(std::vector<std::string>& victims);
  std::string file_path(uint64_t hash) const;
  void reject(const std::string& path, const std::string& why);
  void warn_write_error(const std::string& what);

  TierOptions opts_;
  uint64_t fingerprint_;
  int block_size_;
  int64_t payload_bytes_;
  BlockFileSpec file_spec_;

  // Tier 1 (engine thread only): blocks, sized payload + tokens.
  ByteLru<uint64_t, TierBlockPtr> host_;

  // Tier 2.
  bool disk_on_ = false;
  std::string dir_;
  mutable std::mutex disk_mu_;
  ByteLru<uint64_t, std::monostate> disk_;  // files on disk by hash, sized in file bytes
  std::condition_variable queue_cv_, idle_cv_;
  std::deque<TierBlockPtr> queue_;
  std::unordered_map<uint64_t, int> queued_;  // hashes in queue_ or being written
  bool writing_ = false;
  bool stop_ = false;
  bool write_warned_ = false;
  std::thread writer_;

  // Read-ahead (prefetch): one reader thread; its queue and results under their own mutex.
  std::mutex prefetch_mu_;
  std::condition_variable prefetch_cv_, prefetch_idle_cv_;
  std::deque<std::vector<ChainBlock>> prefetch_queue_;
  bool reading_ = false;
  bool prefetch_stop_ = false;
  ByteLru<uint64_t, TierBlockPtr> prefetched_;  // sized by payload; the oldest go first
  std::thread reader_;

  struct Atomics {
    std::atomic<int64_t> hits[2] = {}, misses[2] = {};
    std::atomic<int64_t> bytes_read{0}, bytes_written{0}, blocks_written{0}, writes_dropped{0}, write_errors{0},
        files_rejected{0}, host_used{0}, disk_used{0};
  };
  Atomics n_;
};

}  // namespace mla::kv
