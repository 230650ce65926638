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
//
// Read-ahead (io_threads > 0): the model predicts the experts a coming layer will select and
// hands them to read_ahead(); a few I/O threads read the ones not cached while the forward
// computes. A slot read ahead is reserved for its layer until that layer's acquire (a reserved
// or pinned slot is never a read-ahead's victim); the acquire pins what it needs, takes over a
// queued read it needs, waits only for reads in flight it needs, and reads the rest on demand.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
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
  int io_threads = 0;  // read-ahead I/O threads (--expert-io-threads); 0: experts are read only on demand
};

// Counters since load, for /metrics and `mla bench --profile`.
struct ExpertCacheCounters {
  int64_t hits = 0;          // (layer, expert) lookups found in the cache or being read ahead
  int64_t misses = 0;        // lookups the forward read from the file itself (on demand)
  int64_t bytes_read = 0;    // file bytes read, on demand and ahead (O_DIRECT alignment included)
  double stall_seconds = 0;  // wall time the forward waited for experts: on-demand reads, reads ahead in flight
  // Read-ahead. Per step and layer, a prediction is a set of experts; precision is
  // predictions_used / predictions, recall predictions_used / predictable_uses.
  int64_t read_ahead = 0;        // experts the I/O threads read
  int64_t read_ahead_bytes = 0;  // the file bytes they read (part of bytes_read)
  int64_t predictions = 0;       // (layer, expert) pairs predicted
  int64_t predictions_used = 0;  // of those, the pairs the layer then used
  int64_t predictable_uses = 0;  // (layer, expert) pairs used by a layer that had a prediction
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
  // One thread (the forward's) calls acquire, release and read_ahead; the I/O threads are the
  // cache's own.
  void acquire(const LayerWeights& L, const int32_t* experts, int64_t n, ThreadPool& pool, ExpertLease& lease);
  void release(ExpertLease& lease);
  // The experts[0..n) that layer L (a routed layer) is predicted to select, most wanted first: the
  // ones not cached are queued for the I/O threads into slots no acquire pins and no other
  // prediction reserves (as many as there are), and all of them are reserved for L until L's next
  // acquire. Replaces L's previous prediction. Returns at once; a read error is dropped (the
  // acquire reads that expert again and reports it). Does nothing without io_threads.
  void read_ahead(const LayerWeights& L, const int32_t* experts, int64_t n);
  bool reads_ahead() const { return !io_threads_.empty(); }
  // Blocks until no read ahead is queued or in flight (tests, and the destructor's order).
  void wait_read_ahead_idle();
  // Expert e's rows of w (a routed tensor of the lease's layer) in its slot, as w.rows() would
  // give them (packed groups or the file's rows). Safe from any thread while the lease holds e.
  WeightMatrix matrix(const ExpertLease& lease, const WeightMatrix& w, int32_t e) const;

  ExpertCacheCounters counters() const;
  int64_t n_slots() const { return n_slots_; }
  int io_threads() const { return static_cast<int>(io_threads_.size()); }
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
  // A slot's contents: Queued (a read ahead waiting for an I/O thread), Reading (by an I/O thread
  // or by an acquire's on-demand read), Failed (a read ahead that failed: read again on use).
  enum class SlotState : uint8_t { Empty, Queued, Reading, Ready, Failed };
  struct ReadJob {
    int32_t slot;
    int64_t key;
  };

  static int64_t slot_span(const Tensor& t);  // bytes of an expert's rows of t in a slot
  void add_layer(const GgufFile& f, const LayerWeights& L, const std::string& blk_prefix);
  void open_files(const GgufFile& f);
  int32_t layer_index(const LayerWeights& L) const;
  // A slot for a new key, mu_ held: an empty one, else the policy's victim among the slots neither
  // pinned, reserved nor being read; -1 when there is none. steal: then also a slot another
  // layer's prediction reserved (its reservation dropped), waiting (lk released) for a read ahead
  // to finish where that is the only way to get one.
  int32_t pick_victim(std::unique_lock<std::mutex>& lk, bool steal);
  int32_t policy_victim(bool reserved) const;
  void assign(int32_t slot, int64_t key);  // slot now holds key (its old key dropped), mu_ held
  void age();
  void count_use(int32_t layer, int32_t expert);  // LFU counts and prediction accuracy, mu_ held
  void drop_reservations(int32_t layer);          // mu_ held
  // acquire's steps, mu_ held: pins the lease's experts (hits, reads ahead, misses into
  // miss_keys_ / miss_slots_, reads ahead in flight into wait_slots_).
  void pin_experts(int32_t layer, const int32_t* experts, int64_t n, std::unique_lock<std::mutex>& lk,
                   ExpertLease& lease);
  // acquire's misses read on pool's threads (lk released meanwhile), then the reads ahead it waits
  // for (those that failed read on demand as well); on an error every slot being filled is
  // emptied and the lease's pins released before the throw. Returns the experts read on demand.
  int64_t load_misses(int32_t layer, ThreadPool& pool, std::unique_lock<std::mutex>& lk, ExpertLease& lease);
  // Reads miss_slots_ (keys miss_keys_) of layer li on pool's threads, lk released; the first error, or "".
  std::string read_on_pool(int32_t li, ThreadPool& pool, std::unique_lock<std::mutex>& lk);
  // An error inside acquire, mu_ held: the misses it was filling emptied, its pins released.
  void unwind(ExpertLease& lease);
  // An I/O thread: takes queued reads ahead until stop_.
  void io_thread();
  void load(const Tensor& t, int32_t expert, uint8_t* slot, std::vector<uint8_t>& staging, int64_t& bytes_read) const;
  const Layer& layer_of(const ExpertLease& lease) const { return layers_[static_cast<size_t>(lease.layer)]; }
  void add_stall(std::chrono::steady_clock::time_point t0);

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

  std::mutex mu_;                       // guards everything below (acquire releases it while reading)
  std::condition_variable read_done_;   // a slot left Reading
  std::condition_variable jobs_ready_;  // a job for the I/O threads, or stop_
  std::vector<int64_t> slot_key_;       // layer * n_expert + expert, -1: empty
  std::vector<SlotState> slot_state_;
  std::vector<int32_t> slot_reserved_;  // layer + 1 of the prediction that reserved it, 0: none
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
  std::vector<int32_t> miss_keys_, miss_slots_, wait_slots_, new_keys_;
  std::vector<std::vector<int32_t>> reserved_;  // per layer: the slots its prediction reserved
  // Per layer: whether it has a prediction, and per key: predicted, used since the prediction.
  std::vector<uint8_t> has_prediction_, predicted_, used_;
  std::deque<ReadJob> jobs_;
  int64_t reads_in_flight_ = 0;  // jobs an I/O thread took and has not finished
  bool stop_ = false;
  std::vector<std::thread> io_threads_;

  std::atomic<int64_t> hits_{0}, misses_{0}, bytes_read_{0};
  std::atomic<int64_t> stall_ns_{0};
  std::atomic<int64_t> read_ahead_{0}, read_ahead_bytes_{0};
  std::atomic<int64_t> predictions_{0}, predictions_used_{0}, predictable_uses_{0};
};

}  // namespace mla
