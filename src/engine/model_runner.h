#pragma once
// What the engine needs from a model: one forward call per step over a BatchMeta, and the latent
// cache it reads and writes. The real runner wraps the deepseek2 forward (engine/model_runner.cpp);
// tests use a fake that follows the same contract.
#include <cstdint>
#include <string>

#include "engine/batch_meta.h"
#include "kv/latent_cache.h"

namespace mla {

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  virtual int n_vocab() const = 0;
  // Longest sequence the model supports (n_ctx_train), tokens.
  virtual int max_context() const = 0;
  virtual kv::LatentCache& cache() = 0;

  // Computes the step: writes the latent row of every query token at its slot (every layer),
  // attends each sequence over its context rows, and stores the logits of the last query row of
  // each sequence with needs_logits into logits[row * n_vocab ...], rows in sequence order
  // (meta.n_logit_rows() rows). The result for a sequence must not depend on the other
  // sequences in the batch (batch invariance).
  virtual void forward(const BatchMeta& meta, float* logits) = 0;
};

}  // namespace mla
