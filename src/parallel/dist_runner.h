#pragma once
// The model runner of a multi-process run (`mpirun -np N mla run|serve|bench`). Rank 0 runs the
// whole engine (HTTP, tokenizer, scheduler, sampler) over a DistributedRunner: before each
// forward it broadcasts the step (engine/BatchMeta with rank 0's block table, and any
// copy-on-write block copies) and then computes its own share with everyone else. The workers
// (rank > 0) run serve_worker_steps: the same forward over the same batch, no logits. Which share
// a rank computes is the model's business (ModelOptions::comm).
#include <memory>
#include <string>
#include <vector>

#include "engine/deepseek2_runner.h"
#include "parallel/comm.h"
#include "parallel/rank_stats.h"
#include "parallel/step_wire.h"

namespace mla {

class DistributedRunner final : public Deepseek2Runner {
 public:
  // model.comm must be `comm`.
  DistributedRunner(Comm& comm, const std::string& path, MlaPathPolicy policy, const ModelOptions& model,
                    const KvCacheOptions& kv);
  // Stops the workers (when they were started).
  ~DistributedRunner() override;
  DistributedRunner(const DistributedRunner&) = delete;
  DistributedRunner& operator=(const DistributedRunner&) = delete;

  void forward(const BatchMeta& meta, float* logits) override;
  void copy_block(int32_t src, int32_t dst) override;
  // Applied here at once and sent with the next step: the workers' caches mirror rank 0's rows.
  void load_block(int32_t dst, const uint8_t* bytes) override;
  // Every rank's memory, communication and shard (index = rank), rank 0's own included.
  std::vector<RankStats> rank_stats();
  // After the start-up check: from now on the workers wait for steps.
  void set_workers_started() { workers_started_ = true; }

 private:
  Comm& comm_;
  BlockCopies pending_copies_;          // applied here at once, sent with the next step
  std::vector<uint8_t> pending_loads_;  // the rows of the loads among them, block after block
  std::vector<int32_t> payload_;
  bool workers_started_ = false;
};

// This rank's RankStats (any runner: one process is rank 0 of 1).
RankStats own_rank_stats(const Deepseek2Runner& runner, const Comm& comm);

// A worker rank's loop: each step's copies and forward as rank 0 sends them, until Stop.
void serve_worker_steps(Comm& comm, Deepseek2Runner& runner);

// The runner for this process. One process: a Deepseek2Runner. Under mpirun with N > 1 ranks,
// every rank loads the file with its share, then all check together that each rank loaded the
// same file (size and a hash of the header) and none failed; a failure is one mla::Error naming
// the rank on rank 0 (the workers leave quietly with WorkerExit). Rank 0 gets a
// DistributedRunner; a worker serves rank 0's steps here and gets nullptr when rank 0 stops
// (the caller returns).
std::unique_ptr<Deepseek2Runner> open_runner(const std::string& path, MlaPathPolicy policy, ModelOptions model,
                                             const KvCacheOptions& kv);

}  // namespace mla
