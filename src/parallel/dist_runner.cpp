#include "parallel/dist_runner.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "gguf/gguf.h"
#include "parallel/shard_pages.h"
#include "parallel/world.h"
#include "util/error.h"
#include "util/log.h"

namespace mla {
namespace {

// What each rank tells the others after loading: all equal and ok, or the job stops.
struct RankStatus {
  int32_t ok = 0;
  int32_t pid = 0;
  uint64_t file_size = 0;
  uint64_t header_hash = 0;  // gguf_file_fingerprint
  char message[496] = {};
};

}  // namespace

DistributedRunner::DistributedRunner(Comm& comm, const std::string& path, MlaPathPolicy policy,
                                     const ModelOptions& model, const KvCacheOptions& kv)
    : Deepseek2Runner(path, policy, model, kv), comm_(comm) {}

DistributedRunner::~DistributedRunner() {
  if (!workers_started_) return;
  StepHeader h;
  h.command = static_cast<int32_t>(StepCommand::Stop);
  try {
    comm_.broadcast(&h, sizeof h, 0);
  } catch (const Error& e) {
    log().error("parallel: could not stop the workers: {}", e.what());
  }
}

void DistributedRunner::copy_block(int32_t src, int32_t dst) {
  Deepseek2Runner::copy_block(src, dst);
  pending_copies_.emplace_back(src, dst);
}

void DistributedRunner::load_block(int32_t dst, const uint8_t* bytes) {
  Deepseek2Runner::load_block(dst, bytes);
  const auto n = static_cast<size_t>(cache().block_bytes());
  pending_copies_.emplace_back(-1 - static_cast<int32_t>(pending_loads_.size() / n), dst);
  pending_loads_.insert(pending_loads_.end(), bytes, bytes + n);
}

void DistributedRunner::forward(const BatchMeta& meta, float* logits) {
  StepHeader h = encode_step(meta, pending_copies_, payload_);
  pending_copies_.clear();
  comm_.broadcast(&h, sizeof h, 0);
  comm_.broadcast(payload_.data(), payload_.size() * sizeof(int32_t), 0);
  if (!pending_loads_.empty()) {
    comm_.broadcast(pending_loads_.data(), pending_loads_.size(), 0);
    pending_loads_.clear();
  }
  Deepseek2Runner::forward(meta, logits);
}

RankStats own_rank_stats(const Deepseek2Runner& runner, const Comm& comm) {
  RankStats s;
  read_resident_memory(s, std::filesystem::canonical(runner.file().path()).string());
  s.comm_sent_bytes = comm.counters().bytes_sent.load();
  s.comm_received_bytes = comm.counters().bytes_received.load();
  s.comm_messages = comm.counters().messages.load();
  s.expert_bytes = runner.moe_counters().expert_bytes.load();
  const ShardBytes mapped = map_rank_shard(runner.config(), runner.weights(), comm.rank(), comm.size(), false);
  s.shard_bytes = mapped.sharded + mapped.replicated;
  s.shard_split_bytes = mapped.sharded;
  const DeepseekConfig& c = runner.config();
  const ShardRange ex = shard_range(c.n_expert, comm.rank(), comm.size());
  const ShardRange hd = shard_range(c.n_head, comm.rank(), comm.size());
  s.expert_begin = ex.begin;
  s.expert_end = ex.end;
  s.head_begin = hd.begin;
  s.head_end = hd.end;
  return s;
}

std::vector<RankStats> DistributedRunner::rank_stats() {
  StepHeader h;
  h.command = static_cast<int32_t>(StepCommand::Stats);
  comm_.broadcast(&h, sizeof h, 0);
  const RankStats mine = own_rank_stats(*this, comm_);
  std::vector<RankStats> all(static_cast<size_t>(comm_.size()));
  comm_.all_gather(&mine, sizeof mine, all.data());
  return all;
}

void serve_worker_steps(Comm& comm, Deepseek2Runner& runner) {
  StepHeader h;
  std::vector<int32_t> payload;
  BatchMeta meta;
  BlockCopies copies;
  std::vector<uint8_t> loads;
  const auto block_bytes = static_cast<size_t>(runner.cache().block_bytes());
  for (;;) {
    comm.broadcast_idle(&h, sizeof h, 0);
    if (h.command == static_cast<int32_t>(StepCommand::Stop)) return;
    if (h.command == static_cast<int32_t>(StepCommand::Stats)) {
      const RankStats mine = own_rank_stats(runner, comm);
      std::vector<RankStats> all(static_cast<size_t>(comm.size()));
      comm.all_gather(&mine, sizeof mine, all.data());
      continue;
    }
    payload.resize(static_cast<size_t>(std::max(h.payload_ints, 0)));
    comm.broadcast(payload.data(), payload.size() * sizeof(int32_t), 0);
    decode_step(h, payload, meta, copies);
    if (const int32_t n = n_loads(copies); n > 0) {
      loads.resize(static_cast<size_t>(n) * block_bytes);
      comm.broadcast(loads.data(), loads.size(), 0);
    }
    for (const auto& [src, dst] : copies) {
      if (src < 0)
        runner.Deepseek2Runner::load_block(dst, loads.data() + static_cast<size_t>(load_index(src)) * block_bytes);
      else
        runner.Deepseek2Runner::copy_block(src, dst);
    }
    try {
      runner.forward(meta, nullptr);
    } catch (const Error& e) {
      // Rank 0 checks the same batch the same way and reports it; the step is over for everyone.
      log().debug("step failed here as on rank 0: {}", e.what());
    }
  }
}

std::unique_ptr<Deepseek2Runner> open_runner(const std::string& path, MlaPathPolicy policy, ModelOptions model,
                                             const KvCacheOptions& kv) {
  Comm& comm = world();
  if (comm.size() == 1) return std::make_unique<Deepseek2Runner>(path, policy, model, kv);
  model.comm = &comm;
  std::unique_ptr<Deepseek2Runner> runner;
  RankStatus mine;
  mine.pid = static_cast<int32_t>(getpid());
  try {
    if (comm.rank() == 0)
      runner = std::make_unique<DistributedRunner>(comm, path, policy, model, kv);
    else
      runner = std::make_unique<Deepseek2Runner>(path, policy, model, kv);
    mine.file_size = runner->file().file_size();
    mine.header_hash = gguf_file_fingerprint(runner->file());
    mine.ok = 1;
  } catch (const Error& e) {
    std::strncpy(mine.message, e.what(), sizeof mine.message - 1);
  }
  std::vector<RankStatus> all(static_cast<size_t>(comm.size()));
  comm.all_gather(&mine, sizeof mine, all.data());

  std::string problem;
  bool all_alike = true;  // every rank failed with the same message (a config error, -np too large)
  for (int r = 0; r < comm.size(); ++r)
    all_alike = all_alike && !all[r].ok && std::strcmp(all[r].message, all[0].message) == 0;
  if (all_alike) problem = fmt::format("all {} ranks: {}", comm.size(), all[0].message);
  for (int r = 0; r < comm.size() && problem.empty(); ++r)
    if (!all[r].ok) problem = fmt::format("rank {}: {}", r, all[r].message);
  for (int r = 1; r < comm.size() && problem.empty(); ++r)
    if (all[r].file_size != all[0].file_size || all[r].header_hash != all[0].header_hash)
      problem = fmt::format(
          "rank {} opened a different model file than rank 0 ('{}': {} bytes, fingerprint {:016x} there; {} bytes, "
          "{:016x} on rank 0)",
          r, path, all[r].file_size, all[r].header_hash, all[0].file_size, all[0].header_hash);
  if (!problem.empty()) {
    if (comm.rank() == 0) throw Error(problem);
    throw WorkerExit{1};
  }

  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const DeepseekConfig& c = runner->config();
  const ShardRange ex = shard_range(c.n_expert, comm.rank(), comm.size());
  const ShardRange hd = shard_range(c.n_head, comm.rank(), comm.size());
  const ShardBytes mapped = map_rank_shard(c, runner->weights(), comm.rank(), comm.size(), model.prefault);
  log().info(
      "parallel: rank {} of {} (pid {} on {}): routed experts [{}, {}), heads [{}, {}); reads {:.1f} MiB of the model "
      "file ({:.1f} MiB its share, {:.1f} MiB every rank's)",
      comm.rank(), comm.size(), getpid(), host, ex.begin, ex.end, hd.begin, hd.end,
      (mapped.sharded + mapped.replicated) / 1048576.0, mapped.sharded / 1048576.0, mapped.replicated / 1048576.0);
  if (comm.rank() == 0) {
    static_cast<DistributedRunner&>(*runner).set_workers_started();
    return runner;
  }
  serve_worker_steps(comm, *runner);
  return nullptr;
}

}  // namespace mla
