#pragma once
// Routed experts streamed from the model file through a cache (`--weights-memory BYTES`), for
// files larger than memory. The tensors every token reads stay resident as without a budget; the
// routed expert tensors (blk.N.ffn_{gate,up,gate_up,down}_exps of the trunk and of a loaded MTP
// block) are neither prefaulted nor repacked at load. The MoE layer asks for the experts its
// tokens selected before its parallel section (acquire); a miss reads each of the expert's
// tensors' rows (contiguous in the file: rows [e * slice_rows, (e + 1) * slice_rows)) with one
// pread, O_DIRECT where the file system takes it, into a slot of budget - resident bytes, and
// repacks them there exactly as load-time repacking packs an expert's slice (quant/packed.h
// pack_rows over the same 16-row groups), so every matmul reads the same bytes as the resident
// run and the logits are the same bits. A slot pinned by an acquire is never evicted until its
// release; the victim is the least frequently used (counts halved every aging period) or, for
// comparison, the least recently used.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/thread_pool.h"
#include "model/config.h"

namespace mla {

class GgufFile;
struct DeepseekWeights;
struct LayerWeights;

enum class ExpertEviction { Lfu, Lru };

struct ExpertCacheOptions {
  int64_t budget_bytes = 0;      // all weights' memory; 0: off (every expert resident in the mapping)
  int64_t max_batch_tokens = 0;  // the model's ModelOptions::max_batch_tokens: sizes the smallest budget
  ExpertEviction eviction = ExpertEviction::Lfu;
  bool repack = true;  // pack cached experts (as load-time repacking would); false: the file's rows
};

// Counters since load, for /metrics and `mla bench --profile`.
struct ExpertCacheCounters {
  int64_t hits = 0;          // (layer, expert) lookups found in the cache
  int64_t misses = 0;        // lookups that read the expert from the file
  int64_t bytes_read = 0;    // file bytes read for misses (O_DIRECT alignment included)
  double stall_seconds = 0;  // wall time the forward waited for misses (read + repack)
};

// The MoE pairs one call of the MoE layer holds at most (Deepseek2Model's pair buffers), and so
// the most distinct experts one acquire asks for: min(n_expert, this).
inline int64_t moe_pair_capacity(int64_t max_batch_tokens, int64_t n_expert_used) {
  return max_batch_tokens > n_expert_used ? max_batch_tokens : n_expert_used;
}

// True for the names of routed expert tensors (what the cache streams).
bool is_routed_expert_tensor(const std::string& name);

// The experts of one layer an acquire pinned: slot_of[e] >= 0 for each listed expert.
struct ExpertLease {
  int32_t layer = -1;            // -1: nothing held
  std::vector<int32_t> slot_of;  // [n_expert]
  std::vector<int32_t> pinned;   // the slots this lease pinned
};

class ExpertCache {
 public:
  // Sizes the cache from the budget and checks it: a budget above physical memory, or one that
  // leaves fewer slots than one MoE call's experts, throws mla::Error with the bytes needed. w's
  // routed expert matrices keep their mapping pointers (the cache's keys) and must not be packed.
  ExpertCache(const GgufFile& f, const DeepseekConfig& c, const DeepseekWeights& w, const ExpertCacheOptions& opt);
  ~ExpertCache();
  ExpertCache(const ExpertCache&) = delete;
  ExpertCache& operator=(const ExpertCache&) = delete;

  // Pins experts[0..n) of layer L (a routed layer of the weights given at construction: trunk or
  // MTP), reading the missing ones on pool's threads; lease.slot_of says where each is. Throws
  // mla::Error naming the tensor on a read error; then nothing stays pinned or half-loaded.
  void acquire(const LayerWeights& L, const int32_t* experts, int64_t n, ThreadPool& pool, ExpertLease& lease);
  void release(ExpertLease& lease);
  // Expert e's rows of w (a routed tensor of the lease's layer) in its slot, as w.rows() would
  // give them (packed groups or the file's rows). Safe from any thread while the lease holds e.
  WeightMatrix matrix(const ExpertLease& lease, const WeightMatrix& w, int32_t e) const;

  ExpertCacheCounters counters() const;
  int64_t n_slots() const { return n_slots_; }
  int64_t slot_bytes() const { return slot_bytes_; }
  int64_t resident_bytes() const { return resident_bytes_; }
  bool direct_io() const { return direct_io_; }
  // "expert cache: 12 slots of 1.2 MiB (..), resident tensors .., reads O_DIRECT, eviction lfu"
  std::string describe() const;

 private:
  struct Tensor {
    std::string name;
    const uint8_t* key = nullptr;  // the bound matrix's data pointer: identifies it
    int fd = -1;                   // its shard's descriptor
    uint64_t file_offset = 0;      // expert 0's first row in the file
    int64_t slice_rows = 0;        // rows per expert
    WeightMatrix shape;            // type, n_cols, row_bytes, scale (no data)
    int64_t raw_bytes = 0;         // one expert's rows in the file
    int64_t group_bytes = 0;       // > 0: packed into 16-row groups of this size in the slot
    int64_t slot_offset = 0;       // where its rows start in a slot
  };
  struct Layer {
    std::vector<Tensor> tensors;
  };

  static int64_t slot_span(const Tensor& t);  // bytes of an expert's rows of t in a slot
  void add_layer(const GgufFile& f, const LayerWeights& L, const std::string& blk_prefix);
  void open_files(const GgufFile& f);
  int32_t pick_victim();
  void age();
  // acquire's misses (miss_keys_ / miss_slots_) read on pool's threads; on an error every slot
  // they were filling is emptied and the lease's pins released before the throw. mu_ held.
  void load_misses(int32_t layer, ThreadPool& pool, ExpertLease& lease);
  void load(const Tensor& t, int32_t expert, uint8_t* slot, std::vector<uint8_t>& staging, int64_t& bytes_read) const;
  const Layer& layer_of(const ExpertLease& lease) const { return layers_[static_cast<size_t>(lease.layer)]; }

  ExpertCacheOptions opt_;
  int64_t n_expert_ = 0;
  std::vector<Layer> layers_;
  std::unordered_map<const uint8_t*, int32_t> layer_index_;  // ffn_down_exps data -> layer
  std::vector<int> fds_;                                     // one per shard
  bool direct_io_ = false;
  std::string io_note_;  // why reads are buffered
  int64_t resident_bytes_ = 0;
  int64_t slot_bytes_ = 0;
  int64_t n_slots_ = 0;
  int64_t max_raw_bytes_ = 0;
  PackedWeightStore arena_;
  uint8_t* slots_ = nullptr;

  std::mutex mu_;                  // guards everything below; held for a whole acquire
  std::vector<int64_t> slot_key_;  // layer * n_expert + expert, -1: empty
  std::vector<int32_t> slot_pins_;
  std::vector<uint64_t> slot_last_use_;
  std::vector<int32_t> key_slot_;   // [layers * n_expert]: -1 when not cached
  std::vector<uint32_t> key_uses_;  // use counts, halved every aging period (LFU)
  int64_t n_filled_ = 0;
  uint64_t tick_ = 0;
  int64_t aging_period_ = 0;
  int64_t uses_since_aging_ = 0;
  std::vector<std::vector<uint8_t>> staging_;  // per pool thread: aligned read buffers
  std::vector<std::string> thread_errors_;     // per pool thread: its first read error
  std::vector<int64_t> thread_bytes_;          // per pool thread: bytes it read
  std::vector<int32_t> miss_keys_, miss_slots_;

  std::atomic<int64_t> hits_{0}, misses_{0}, bytes_read_{0};
  std::atomic<int64_t> stall_ns_{0};
};

}  // namespace mla
