#include "model/expert_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string_view>

#include "gguf/gguf.h"
#include "model/weights.h"
#include "quant/packed.h"
#include "util/error.h"

namespace mla {
namespace {

// O_DIRECT needs the file offset, the length and the buffer aligned to the device's logical
// block: 4 KiB covers every block size Linux file systems use.
constexpr uint64_t kDirectAlign = 4096;
constexpr int64_t kSlotAlign = 64;
constexpr int kMaxIoThreads = 64;  // each tensor's rows in a slot: the packed kernels' loads

int64_t round_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

// "blk.N." -> N, or -1 for names outside the blocks.
int64_t block_of(const std::string& name) {
  if (!name.starts_with("blk.")) return -1;
  int64_t n = 0;
  size_t i = 4;
  if (i >= name.size() || name[i] < '0' || name[i] > '9') return -1;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) n = n * 10 + (name[i] - '0');
  return i < name.size() && name[i] == '.' ? n : -1;
}

uint8_t* aligned_in(std::vector<uint8_t>& buf) {
  const auto p = reinterpret_cast<uintptr_t>(buf.data());
  return buf.data() + (kDirectAlign - p % kDirectAlign) % kDirectAlign;
}

std::string mib(int64_t bytes) { return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20)); }

}  // namespace

bool is_routed_expert_tensor(const std::string& name) {
  if (block_of(name) < 0) return false;
  for (std::string_view s :
       {".ffn_gate_exps.weight", ".ffn_up_exps.weight", ".ffn_gate_up_exps.weight", ".ffn_down_exps.weight"})
    if (name.ends_with(s)) return true;
  return false;
}

ExpertCache::ExpertCache(const GgufFile& f, const DeepseekConfig& c, const DeepseekWeights& w,
                         const ExpertCacheOptions& opt)
    : opt_(opt), n_expert_(c.n_expert) {
  const double phys = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  if (static_cast<double>(opt.budget_bytes) > phys)
    fail("--weights-memory {} bytes is more than this machine's memory ({} bytes)", opt.budget_bytes,
         static_cast<int64_t>(phys));
  open_files(f);
  for (size_t il = 0; il < w.layers.size(); ++il)
    if (w.layers[il].is_moe) add_layer(f, w.layers[il], fmt::format("blk.{}.", il));
  if (w.nextn.present && w.nextn.layer.is_moe) add_layer(f, w.nextn.layer, fmt::format("blk.{}.", w.nextn.layer_index));
  // Resident: every tensor the forward reads that is not streamed (an MTP block that is not
  // loaded is never read).
  const int64_t last_block = w.nextn.present ? w.nextn.layer_index : c.n_layer - 1;
  for (const GgufTensorInfo& t : f.tensors())
    if (!is_routed_expert_tensor(t.name) && block_of(t.name) <= last_block)
      resident_bytes_ += static_cast<int64_t>(t.n_bytes);
  int64_t per_expert = 0;
  for (const Layer& l : layers_)
    per_expert = std::max(per_expert, l.tensors.back().slot_offset + slot_span(l.tensors.back()));
  slot_bytes_ = round_up(std::max<int64_t>(per_expert, 1), 4096);
  const int64_t cache_bytes = opt.budget_bytes - resident_bytes_;
  n_slots_ = cache_bytes > 0 ? cache_bytes / slot_bytes_ : 0;
  const int64_t needed = std::min(n_expert_, moe_pair_capacity(opt.max_batch_tokens, c.n_expert_used));
  if (!layers_.empty() && n_slots_ < needed)
    fail(
        "--weights-memory {} bytes is too small: the resident tensors take {} bytes and one MoE layer of a "
        "{}-token batch can select {} experts of {} bytes each; give at least {} bytes",
        opt.budget_bytes, resident_bytes_, opt.max_batch_tokens, needed, slot_bytes_,
        resident_bytes_ + needed * slot_bytes_);
  if (layers_.empty()) n_slots_ = 0;
  if (n_slots_ > 0) {
    // Never more slots than experts.
    n_slots_ = std::min<int64_t>(n_slots_, static_cast<int64_t>(layers_.size()) * n_expert_);
    arena_.reserve(static_cast<size_t>(n_slots_ * slot_bytes_));
    slots_ = arena_.allocate(static_cast<size_t>(n_slots_ * slot_bytes_));
  }
  slot_key_.assign(static_cast<size_t>(n_slots_), -1);
  slot_pins_.assign(static_cast<size_t>(n_slots_), 0);
  slot_last_use_.assign(static_cast<size_t>(n_slots_), 0);
  key_slot_.assign(layers_.size() * static_cast<size_t>(n_expert_), -1);
  key_uses_.assign(key_slot_.size(), 0);
  aging_period_ = std::max<int64_t>(64, 8 * n_slots_);
  slot_state_.assign(static_cast<size_t>(n_slots_), SlotState::Empty);
  slot_reserved_.assign(static_cast<size_t>(n_slots_), 0);
  reserved_.resize(layers_.size());
  has_prediction_.assign(layers_.size(), 0);
  predicted_.assign(key_slot_.size(), 0);
  used_.assign(key_slot_.size(), 0);
  if (opt.io_threads < 0 || opt.io_threads > kMaxIoThreads)
    fail("--expert-io-threads {}: expected 0 to {}", opt.io_threads, kMaxIoThreads);
  if (n_slots_ > 0)
    for (int i = 0; i < opt.io_threads; ++i) io_threads_.emplace_back([this] { io_thread(); });
}

ExpertCache::~ExpertCache() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  jobs_ready_.notify_all();
  read_done_.notify_all();
  for (std::thread& t : io_threads_) t.join();
  for (int fd : fds_)
    if (fd >= 0) close(fd);
}

void ExpertCache::open_files(const GgufFile& f) {
  direct_io_ = true;
  std::vector<uint8_t> probe(2 * kDirectAlign);
  for (const GgufShard& s : f.shards()) {
    int fd = open(s.path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    // Some file systems (tmpfs, some overlays) refuse O_DIRECT at open or at the first read.
    if (fd >= 0 && pread(fd, aligned_in(probe), kDirectAlign, 0) < 0) {
      io_note_ = fmt::format("O_DIRECT read refused: {}", std::strerror(errno));
      close(fd);
      fd = -1;
    } else if (fd < 0) {
      io_note_ = fmt::format("O_DIRECT open refused: {}", std::strerror(errno));
    }
    if (fd < 0) {
      direct_io_ = false;
      fd = open(s.path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) fail("expert cache: cannot open {}: {}", s.path, std::strerror(errno));
    }
    fds_.push_back(fd);
  }
  if (!direct_io_)  // one mode for every shard
    for (size_t i = 0; i < fds_.size(); ++i)
      if (fcntl(fds_[i], F_SETFL, fcntl(fds_[i], F_GETFL) & ~O_DIRECT) != 0)
        fail("expert cache: {}: {}", f.shards()[i].path, std::strerror(errno));
}

void ExpertCache::add_layer(const GgufFile& f, const LayerWeights& L, const std::string& blk_prefix) {
  Layer layer;
  const int64_t F = L.ffn_down_exps.n_cols, E = L.ffn_down_exps.n_rows / n_expert_;
  auto add = [&](const WeightMatrix& m, const char* role, int64_t slice_rows) {
    const std::string name = blk_prefix + role + ".weight";
    const GgufTensorInfo& t = f.require_tensor(name);
    if (t.converted)
      fail("--weights-memory: {}: {} is stored row-interleaved and converted at load; it cannot be streamed", f.path(),
           name);
    Tensor x;
    x.name = name;
    x.key = m.data;
    x.fd = fds_[t.shard];
    x.file_offset = f.shards()[t.shard].data_offset + t.offset;
    x.slice_rows = slice_rows;
    x.shape = m;
    x.shape.data = nullptr;
    x.raw_bytes = slice_rows * m.row_bytes;
    if (opt_.repack && repacked_bytes(m, slice_rows) > 0) x.group_bytes = packed_group_bytes(m.type, m.n_cols);
    const Tensor* prev = layer.tensors.empty() ? nullptr : &layer.tensors.back();
    x.slot_offset = prev ? round_up(prev->slot_offset + slot_span(*prev), kSlotAlign) : 0;
    max_raw_bytes_ = std::max(max_raw_bytes_, x.raw_bytes);
    layer.tensors.push_back(std::move(x));
  };
  if (L.gate_up_merged) {
    add(L.ffn_gate_up_exps, "ffn_gate_up_exps", 2 * F);
  } else {
    add(L.ffn_gate_exps, "ffn_gate_exps", F);
    add(L.ffn_up_exps, "ffn_up_exps", F);
  }
  add(L.ffn_down_exps, "ffn_down_exps", E);
  layer_index_[L.ffn_down_exps.data] = static_cast<int32_t>(layers_.size());
  layers_.push_back(std::move(layer));
}

int64_t ExpertCache::slot_span(const Tensor& t) {
  return t.group_bytes > 0 ? t.slice_rows / kPackedRows * t.group_bytes : t.raw_bytes;
}

int32_t ExpertCache::layer_index(const LayerWeights& L) const {
  const auto found = layer_index_.find(L.ffn_down_exps.data);
  if (found == layer_index_.end()) fail("expert cache: a MoE layer the cache was not built for");
  return found->second;
}

int32_t ExpertCache::policy_victim(bool reserved) const {
  int32_t best = -1;
  for (int32_t s = 0; s < static_cast<int32_t>(n_slots_); ++s) {
    if (slot_pins_[s] > 0 || slot_state_[s] == SlotState::Reading || (slot_reserved_[s] != 0) != reserved) continue;
    if (slot_key_[s] < 0 || slot_state_[s] == SlotState::Failed) return s;  // emptied by a failed read
    if (best < 0) {
      best = s;
      continue;
    }
    const uint64_t u = key_uses_[slot_key_[s]], ub = key_uses_[slot_key_[best]];
    const bool older = slot_last_use_[s] < slot_last_use_[best];
    if (opt_.eviction == ExpertEviction::Lru ? older : (u < ub || (u == ub && older))) best = s;
  }
  return best;
}

int32_t ExpertCache::pick_victim(std::unique_lock<std::mutex>& lk, bool steal) {
  if (n_filled_ < n_slots_) return static_cast<int32_t>(n_filled_++);
  for (;;) {
    int32_t s = policy_victim(false);
    if (s >= 0 || !steal) return s;
    // Every free slot is reserved by a prediction or being read ahead: the forward's need comes
    // first, so a reserved one is taken, else the next read ahead to finish.
    if ((s = policy_victim(true)) >= 0) {
      slot_reserved_[s] = 0;
      return s;
    }
    bool reading = false;
    for (int32_t i = 0; i < static_cast<int32_t>(n_slots_) && !reading; ++i)
      reading = slot_pins_[i] == 0 && slot_state_[i] == SlotState::Reading;
    if (!reading) return -1;
    read_done_.wait(lk);
  }
}

void ExpertCache::assign(int32_t slot, int64_t key) {
  const int64_t old = slot_key_[slot];
  if (old >= 0 && key_slot_[old] == slot) key_slot_[old] = -1;
  slot_key_[slot] = key;
  key_slot_[key] = slot;
  slot_reserved_[slot] = 0;
}

void ExpertCache::age() {
  for (uint32_t& u : key_uses_) u >>= 1;
}

void ExpertCache::count_use(int32_t layer, int32_t expert) {
  const int64_t key = static_cast<int64_t>(layer) * n_expert_ + expert;
  ++key_uses_[key];
  if (++uses_since_aging_ >= aging_period_) {
    age();
    uses_since_aging_ = 0;
  }
  if (has_prediction_[layer] && !used_[key]) {
    used_[key] = 1;
    predictable_uses_.fetch_add(1, std::memory_order_relaxed);
    if (predicted_[key]) predictions_used_.fetch_add(1, std::memory_order_relaxed);
  }
}

void ExpertCache::drop_reservations(int32_t layer) {
  for (int32_t s : reserved_[layer])
    if (slot_reserved_[s] == layer + 1) slot_reserved_[s] = 0;
  reserved_[layer].clear();
}

void ExpertCache::load(const Tensor& t, int32_t expert, uint8_t* slot, std::vector<uint8_t>& staging,
                       int64_t& bytes_read) const {
  const uint64_t a = direct_io_ ? kDirectAlign : 1;
  const uint64_t want0 = t.file_offset + static_cast<uint64_t>(expert) * static_cast<uint64_t>(t.raw_bytes);
  const uint64_t want1 = want0 + static_cast<uint64_t>(t.raw_bytes);
  const uint64_t r0 = want0 / a * a, r1 = (want1 + a - 1) / a * a;
  uint8_t* buf = aligned_in(staging);
  uint64_t got = 0;
  while (r0 + got < want1) {
    const ssize_t n = pread(t.fd, buf + got, r1 - r0 - got, static_cast<off_t>(r0 + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      struct stat st {};
      const int64_t size = fstat(t.fd, &st) == 0 ? st.st_size : -1;
      fail("expert cache: reading {} expert {} (file bytes {}..{}): {} (the file has {} bytes)", t.name, expert, want0,
           want1, n < 0 ? std::strerror(errno) : "unexpected end of file", size);
    }
    got += static_cast<uint64_t>(n);
  }
  bytes_read += static_cast<int64_t>(got);
  const uint8_t* src = buf + (want0 - r0);
  uint8_t* dst = slot + t.slot_offset;
  if (t.group_bytes == 0) {
    std::memcpy(dst, src, static_cast<size_t>(t.raw_bytes));
    return;
  }
  // The same 16-row groups repack_weight makes of this expert's slice of the whole tensor.
  const int64_t rb = t.shape.row_bytes;
  for (int64_t g = 0; g < t.slice_rows / kPackedRows; ++g)
    pack_rows(t.shape.type, src + g * kPackedRows * rb, rb, t.shape.n_cols, dst + g * t.group_bytes);
}

void ExpertCache::acquire(const LayerWeights& L, const int32_t* experts, int64_t n, ThreadPool& pool,
                          ExpertLease& lease) {
  const auto t0 = std::chrono::steady_clock::now();
  const int32_t li = layer_index(L);
  std::unique_lock lk(mu_);
  lease.layer = li;
  lease.slot_of.assign(static_cast<size_t>(n_expert_), -1);
  lease.pinned.clear();
  miss_keys_.clear();
  miss_slots_.clear();
  wait_slots_.clear();
  ++tick_;
  pin_experts(li, experts, n, lk, lease);
  int64_t n_read = 0;
  if (!miss_keys_.empty() || !wait_slots_.empty()) {
    n_read = load_misses(li, pool, lk, lease);
    add_stall(t0);
  }
  hits_.fetch_add(static_cast<int64_t>(lease.pinned.size()) - n_read, std::memory_order_relaxed);
}

void ExpertCache::pin_experts(int32_t li, const int32_t* experts, int64_t n, std::unique_lock<std::mutex>& lk,
                              ExpertLease& lease) {
  constexpr int32_t kPending = -2;  // listed, its slot chosen below
  auto pin = [&](int32_t s, int32_t e) {
    ++slot_pins_[s];
    slot_last_use_[s] = tick_;
    lease.pinned.push_back(s);
    lease.slot_of[e] = s;
  };
  new_keys_.clear();
  for (int64_t i = 0; i < n; ++i) {
    const int32_t e = experts[i];
    if (lease.slot_of[e] != -1) continue;
    count_use(li, e);
    const int64_t key = static_cast<int64_t>(li) * n_expert_ + e;
    const int32_t s = key_slot_[key];
    if (s < 0) {
      lease.slot_of[e] = kPending;
      new_keys_.push_back(static_cast<int32_t>(key));
      continue;
    }
    if (slot_state_[s] == SlotState::Reading) {
      wait_slots_.push_back(s);  // an I/O thread is reading it
    } else if (slot_state_[s] != SlotState::Ready) {
      slot_state_[s] = SlotState::Reading;  // a queued or failed read ahead: read here, now
      miss_keys_.push_back(static_cast<int32_t>(key));
      miss_slots_.push_back(s);
    }
    pin(s, e);
  }
  // The prediction's experts this call did not ask for become ordinary entries.
  drop_reservations(li);
  for (int32_t key : new_keys_) {
    const int32_t s = pick_victim(lk, /*steal=*/true);
    if (s < 0) {
      unwind(lease);
      fail("expert cache: every one of its {} slots is in use (the budget holds too few experts)", n_slots_);
    }
    assign(s, key);
    slot_state_[s] = SlotState::Reading;
    miss_keys_.push_back(key);
    miss_slots_.push_back(s);
    pin(s, static_cast<int32_t>(key % n_expert_));
  }
}

std::string ExpertCache::read_on_pool(int32_t li, ThreadPool& pool, std::unique_lock<std::mutex>& lk) {
  const int n_threads = pool.n_threads();
  if (staging_.size() < static_cast<size_t>(n_threads)) {
    staging_.resize(n_threads, std::vector<uint8_t>(static_cast<size_t>(max_raw_bytes_ + 3 * kDirectAlign)));
    thread_errors_.resize(n_threads);
    thread_bytes_.resize(n_threads);
  }
  std::vector<std::string>& errors = thread_errors_;
  std::vector<int64_t>& bytes = thread_bytes_;
  for (int t = 0; t < n_threads; ++t) errors[t].clear(), bytes[t] = 0;
  const Layer& layer = layers_[li];
  // The slots are pinned and Reading: no other thread touches them or these lists meanwhile.
  lk.unlock();
  pool.parallel_for(static_cast<int64_t>(miss_keys_.size()), [&](int64_t b0, int64_t b1, int t) {
    for (int64_t i = b0; i < b1 && errors[t].empty(); ++i) {
      try {
        const auto e = static_cast<int32_t>(miss_keys_[i] % n_expert_);
        for (const Tensor& x : layer.tensors) load(x, e, slots_ + miss_slots_[i] * slot_bytes_, staging_[t], bytes[t]);
      } catch (const std::exception& ex) {
        errors[t] = ex.what();
      }
    }
  });
  lk.lock();
  int64_t total = 0;
  for (int64_t b : bytes) total += b;
  bytes_read_.fetch_add(total, std::memory_order_relaxed);
  for (const std::string& err : errors)
    if (!err.empty()) return err;
  return {};
}

int64_t ExpertCache::load_misses(int32_t li, ThreadPool& pool, std::unique_lock<std::mutex>& lk, ExpertLease& lease) {
  int64_t n_read = 0;
  for (;;) {
    if (!miss_keys_.empty()) {
      const std::string err = read_on_pool(li, pool, lk);
      if (!err.empty()) {
        unwind(lease);
        fail("{}", err);
      }
      for (int32_t s : miss_slots_) slot_state_[s] = SlotState::Ready;
      misses_.fetch_add(static_cast<int64_t>(miss_keys_.size()), std::memory_order_relaxed);
      n_read += static_cast<int64_t>(miss_keys_.size());
      miss_keys_.clear();
      miss_slots_.clear();
    }
    if (wait_slots_.empty()) return n_read;
    // The reads ahead this call needs, in flight meanwhile; one that failed is read here.
    for (int32_t s : wait_slots_) {
      read_done_.wait(lk, [&] { return slot_state_[s] != SlotState::Reading; });
      if (slot_state_[s] == SlotState::Failed) {
        slot_state_[s] = SlotState::Reading;
        miss_keys_.push_back(static_cast<int32_t>(slot_key_[s]));
        miss_slots_.push_back(s);
      }
    }
    wait_slots_.clear();
  }
}

void ExpertCache::unwind(ExpertLease& lease) {
  // Nothing half-read stays findable: every slot this call was filling is emptied.
  for (size_t i = 0; i < miss_keys_.size(); ++i) {
    if (key_slot_[miss_keys_[i]] == miss_slots_[i]) key_slot_[miss_keys_[i]] = -1;
    slot_key_[miss_slots_[i]] = -1;
    slot_state_[miss_slots_[i]] = SlotState::Empty;
  }
  miss_keys_.clear();
  miss_slots_.clear();
  wait_slots_.clear();
  for (int32_t s : lease.pinned) --slot_pins_[s];
  lease.pinned.clear();
  lease.layer = -1;
}

void ExpertCache::add_stall(std::chrono::steady_clock::time_point t0) {
  stall_ns_.fetch_add(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count(),
      std::memory_order_relaxed);
}

void ExpertCache::release(ExpertLease& lease) {
  std::lock_guard lk(mu_);
  for (int32_t s : lease.pinned) --slot_pins_[s];
  lease.pinned.clear();
  lease.layer = -1;
}

void ExpertCache::read_ahead(const LayerWeights& L, const int32_t* experts, int64_t n) {
  if (io_threads_.empty()) return;
  const int32_t li = layer_index(L);
  std::unique_lock lk(mu_);
  drop_reservations(li);
  uint8_t* predicted = predicted_.data() + static_cast<int64_t>(li) * n_expert_;
  std::fill(predicted, predicted + n_expert_, 0);
  std::fill(used_.begin() + static_cast<int64_t>(li) * n_expert_, used_.begin() + (li + 1) * n_expert_, 0);
  has_prediction_[li] = 1;
  predictions_.fetch_add(n, std::memory_order_relaxed);
  bool queued = false, full = false;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t e = experts[i];
    predicted[e] = 1;
    const int64_t key = static_cast<int64_t>(li) * n_expert_ + e;
    int32_t s = key_slot_[key];
    if (s < 0) {
      if (full || (s = pick_victim(lk, /*steal=*/false)) < 0) {
        full = true;  // the rest is read on demand if used
        continue;
      }
      assign(s, key);
      slot_last_use_[s] = tick_;
      slot_state_[s] = SlotState::Empty;  // queued below
    }
    if (slot_state_[s] == SlotState::Failed || slot_state_[s] == SlotState::Empty) {
      slot_state_[s] = SlotState::Queued;
      jobs_.push_back({s, key});
      queued = true;
    }
    if (slot_reserved_[s] == 0) {
      slot_reserved_[s] = li + 1;
      reserved_[li].push_back(s);
    }
  }
  lk.unlock();
  if (queued) jobs_ready_.notify_all();
}

void ExpertCache::io_thread() {
  std::vector<uint8_t> staging(static_cast<size_t>(max_raw_bytes_ + 3 * kDirectAlign));
  std::unique_lock lk(mu_);
  for (;;) {
    jobs_ready_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
    if (stop_) return;
    const ReadJob job = jobs_.front();
    jobs_.pop_front();
    // Taken over by an acquire, or its slot given to another expert since.
    if (slot_key_[job.slot] != job.key || slot_state_[job.slot] != SlotState::Queued) {
      if (jobs_.empty()) read_done_.notify_all();  // wait_read_ahead_idle
      continue;
    }
    slot_state_[job.slot] = SlotState::Reading;
    ++reads_in_flight_;
    lk.unlock();
    int64_t bytes = 0;
    bool ok = true;
    try {
      const auto e = static_cast<int32_t>(job.key % n_expert_);
      for (const Tensor& x : layers_[job.key / n_expert_].tensors)
        load(x, e, slots_ + job.slot * slot_bytes_, staging, bytes);
    } catch (const std::exception&) {
      ok = false;  // the acquire that needs it reads it again and reports the error
    }
    lk.lock();
    --reads_in_flight_;
    slot_state_[job.slot] = ok ? SlotState::Ready : SlotState::Failed;
    bytes_read_.fetch_add(bytes, std::memory_order_relaxed);
    read_ahead_bytes_.fetch_add(bytes, std::memory_order_relaxed);
    if (ok) read_ahead_.fetch_add(1, std::memory_order_relaxed);
    read_done_.notify_all();
  }
}

void ExpertCache::wait_read_ahead_idle() {
  std::unique_lock lk(mu_);
  read_done_.wait(lk, [&] { return stop_ || (reads_in_flight_ == 0 && jobs_.empty()); });
}

WeightMatrix ExpertCache::matrix(const ExpertLease& lease, const WeightMatrix& w, int32_t e) const {
  for (const Tensor& t : layer_of(lease).tensors) {
    if (t.key != w.data) continue;
    const uint8_t* at = slots_ + static_cast<int64_t>(lease.slot_of[e]) * slot_bytes_ + t.slot_offset;
    WeightMatrix m = t.shape;
    m.n_rows = t.slice_rows;
    if (t.group_bytes > 0) {
      m.data = w.row(static_cast<int64_t>(e) * t.slice_rows);  // the file's rows: never read
      m.packed = at;
      m.packed_group_bytes = t.group_bytes;
    } else {
      m.data = at;
    }
    return m;
  }
  fail("expert cache: a matrix that is not one of the layer's routed expert tensors");
}

ExpertCacheCounters ExpertCache::counters() const {
  constexpr auto r = std::memory_order_relaxed;
  return {.hits = hits_.load(r),
          .misses = misses_.load(r),
          .bytes_read = bytes_read_.load(r),
          .stall_seconds = static_cast<double>(stall_ns_.load(r)) * 1e-9,
          .read_ahead = read_ahead_.load(r),
          .read_ahead_bytes = read_ahead_bytes_.load(r),
          .predictions = predictions_.load(r),
          .predictions_used = predictions_used_.load(r),
          .predictable_uses = predictable_uses_.load(r)};
}

std::string ExpertCache::describe() const {
  return fmt::format(
      "expert cache: {} slots of {} ({} of the {} budget; resident tensors {}), reads {}, {} experts packed, "
      "eviction {}, {}",
      n_slots_, mib(slot_bytes_), mib(n_slots_ * slot_bytes_), mib(opt_.budget_bytes), mib(resident_bytes_),
      direct_io_ ? "O_DIRECT" : fmt::format("buffered pread ({})", io_note_),
      !layers_.empty() && layers_[0].tensors[0].group_bytes > 0 ? "16-row" : "not",
      opt_.eviction == ExpertEviction::Lru ? "lru" : "lfu with aging",
      io_threads_.empty() ? std::string("read-ahead off")
                          : fmt::format("read-ahead on {} I/O threads", io_threads_.size()));
}

}  // namespace mla
