#pragma once
// What the forward pass shows its observers, in the spirit of llama.cpp's graph eval callback: the
// model calls every registered ForwardObserver at fixed points of each call (a stage begins or
// ends, weight bytes are read, a layer's attention is planned or done, a layer ends), and the
// observers do the rest — stage timing (`mla bench --profile`), path and sparse counting
// (/metrics), `--trace dispatch`, the `--verify-paths` rerun, the doctor's probes. Events come
// from the forward's thread; the pointers in an event are valid only during the call. During the
// verify rerun the model shows nothing.
#include <cstdint>
#include <span>

#include "model/batch.h"
#include "model/stage_counters.h"

namespace mla {

class LatentCache;

// One MLA attention kernel call of a layer: a sequence, or one query of a verifying sequence in
// a sparse layer (Deepseek2Model::plan_attention_calls).
struct AttentionCall {
  SeqMeta seq;
  MlaPath path;      // the model's decision (mla_path)
  bool last_of_seq;  // the sequence's last call (what the trace counts sequences by)
};

enum class ForwardPoint : uint8_t {
  StepBegin,         // the embedding rows are in the residual stream, before trunk layer 0
  StageBegin,        // `stage` begins (stages do not nest)
  StageEnd,          // `stage` ends
  BytesRead,         // `bytes` of weights (or latent cache rows) read in the current stage
  ExpertsRun,        // `n_experts` routed experts ran in a MoE chunk, reading `bytes` of their rows
  AttentionPlanned,  // layer's kernel calls decided: `calls`, and `sel_count` when sparse
  AttentionDone,     // layer's attention output in `attn_out`; `q`, `latent`, `cache` beside it
  LayerEnd,          // trunk layer `layer` is done (its FFN included)
  StepEnd,           // the trunk's logits are written (`logits`; nullptr on a worker rank)
};

struct ForwardEvent {
  ForwardPoint point = ForwardPoint::StepBegin;
  int64_t layer = -1;                // the block: a trunk layer, or n_layer (the MTP block); -1 outside a block
  bool mtp = false;                  // inside forward_mtp (the draft layer), not the trunk
  bool sparse = false;               // the layer attends through the DSA selection
  Stage stage = Stage::Embed;        // StageBegin / StageEnd
  int64_t bytes = 0;                 // BytesRead / ExpertsRun
  int64_t n_experts = 0;             // ExpertsRun
  const BatchMeta* batch = nullptr;  // every point but the stage and byte ones
  std::span<const AttentionCall> calls = {};  // AttentionPlanned
  const int32_t* sel_count = nullptr;         // AttentionPlanned, sparse: [n_tokens] rows each query selected
  const float* q = nullptr;                   // AttentionDone: [T][n_head][qk_nope | qk_rope], q_pe roped
  const float* latent = nullptr;              // AttentionDone: [T][kv_lora_rank | qk_rope], this step's rows in F32
  const float* attn_out = nullptr;            // AttentionDone: [T][n_head][v_head] (the attn_output input)
  // AttentionDone, LayerEnd: this step's rows written. Observers only read it; the verify rerun
  // (LayerEnd) writes the layer's rows again and restores them.
  LatentCache* cache = nullptr;
  const float* logits = nullptr;  // StepEnd: [logits_rows][n_vocab]
};

class ForwardObserver {
 public:
  virtual ~ForwardObserver() = default;
  virtual void on_forward(const ForwardEvent& e) = 0;
};

}  // namespace mla
