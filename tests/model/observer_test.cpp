// The forward's observation points (model/forward_observer.h): what an observer registered on the
// model sees of a trunk call, of the MTP layer, and (nothing) of the --verify-paths rerun; and the
// kernels' path-cost rules the model's decision asks.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/path_cost.h"
#include "model/batch.h"
#include "model/forward_observer.h"
#include "model_test_util.h"

namespace mla {
namespace {

// Records every event; flags a stage opened inside another or closed without being opened.
class Recorder : public ForwardObserver {
 public:
  void on_forward(const ForwardEvent& e) override {
    events.push_back(e.point);
    switch (e.point) {
      case ForwardPoint::StageBegin:
        if (open) bad_nesting = true;
        open = true;
        break;
      case ForwardPoint::StageEnd:
        if (!open) bad_nesting = true;
        open = false;
        break;
      case ForwardPoint::BytesRead:
        bytes += e.bytes;
        break;
      case ForwardPoint::AttentionPlanned:
        planned.push_back({e.layer, e.mtp});
        for (const AttentionCall& c : e.calls) planned_tokens += c.seq.query_len;
        break;
      case ForwardPoint::AttentionDone:
        done.push_back({e.layer, e.mtp});
        if (!e.q || !e.latent || !e.attn_out || !e.cache) missing_rows = true;
        break;
      case ForwardPoint::LayerEnd:
        layer_ends.push_back(e.layer);
        break;
      case ForwardPoint::StepEnd:
        step_logits = e.logits;
        break;
      default:
        break;
    }
  }
  int count(ForwardPoint p) const {
    int n = 0;
    for (ForwardPoint q : events) n += q == p;
    return n;
  }
  struct Layer {
    int64_t layer;
    bool mtp;
    bool operator==(const Layer&) const = default;
  };
  std::vector<ForwardPoint> events;
  std::vector<Layer> planned, done;
  std::vector<int64_t> layer_ends;
  int64_t bytes = 0, planned_tokens = 0;
  const float* step_logits = nullptr;
  bool open = false, bad_nesting = false, missing_rows = false;
};

std::vector<Recorder::Layer> trunk_layers(int64_t n_layer) {
  std::vector<Recorder::Layer> v;
  for (int64_t il = 0; il < n_layer; ++il) v.push_back({il, false});
  return v;
}

TEST(ForwardObserver, SeesEveryTrunkLayerOnceAndNothingOfTheVerifyRerun) {
  auto b = load_deepseek2(testing::synth_file("observer_model", testing::small_spec()), {});
  const int64_t n_layer = b->config.n_layer;
  for (bool verify : {false, true}) {
    Recorder rec;
    ModelOptions mo;
    mo.verify_paths = verify;
    mo.observer = &rec;
    Deepseek2Model m(b->config, b->weights, mo);
    LatentCache cache = m.make_cache(16);
    std::vector<float> logits(2 * b->config.n_vocab);
    BatchMeta batch = single_sequence_batch({1, 2, 3, 4, 5}, 0, false, MlaPathPolicy::Auto);
    batch.logits_rows = {3, 4};
    m.forward(batch, cache, logits.data());
    SCOPED_TRACE(verify ? "verify_paths" : "plain");
    EXPECT_EQ(rec.events.front(), ForwardPoint::StageBegin);  // the embedding
    EXPECT_EQ(rec.events.back(), ForwardPoint::StepEnd);
    EXPECT_EQ(rec.count(ForwardPoint::StepBegin), 1);
    EXPECT_EQ(rec.count(ForwardPoint::StepEnd), 1);
    EXPECT_EQ(rec.step_logits, logits.data());
    // Each trunk layer once, in order, though the verifier ran each one twice.
    EXPECT_EQ(rec.planned, trunk_layers(n_layer));
    EXPECT_EQ(rec.done, trunk_layers(n_layer));
    EXPECT_EQ(rec.planned_tokens, 5 * n_layer);
    std::vector<int64_t> want_ends;
    for (int64_t il = 0; il < n_layer; ++il) want_ends.push_back(il);
    EXPECT_EQ(rec.layer_ends, want_ends);
    EXPECT_FALSE(rec.missing_rows);
    EXPECT_FALSE(rec.bad_nesting);
    EXPECT_FALSE(rec.open);
    EXPECT_EQ(rec.count(ForwardPoint::StageBegin), rec.count(ForwardPoint::StageEnd));
    EXPECT_GT(rec.bytes, 0);
    // The model's own profiler saw the same bytes (the attention's and the experts' besides).
    int64_t profiled = 0;
    for (const auto& v : m.stage_counters().bytes) profiled += v.load();
    EXPECT_GE(profiled, rec.bytes);
    EXPECT_EQ(m.path_counters().tokens_mha + m.path_counters().tokens_mqa, 5);
    EXPECT_EQ(m.verify_log().steps.size(), verify ? 1u : 0u);
  }
}

TEST(ForwardObserver, TheMtpLayerRunsTheSameBlockAndIsMarked) {
  SynthSpec s = testing::small_spec();
  s.n_nextn = 1;
  WeightLoadOptions wo;
  wo.load_mtp = true;
  auto b = load_deepseek2(testing::synth_file("observer_model_mtp", s), wo);
  Recorder rec;
  ModelOptions mo;
  mo.observer = &rec;
  Deepseek2Model m(b->config, b->weights, mo);
  ASSERT_TRUE(m.has_mtp());
  LatentCache cache = m.make_cache(16);
  const int64_t E = b->config.n_embd, V = b->config.n_vocab;
  std::vector<float> logits(V), hidden(3 * E), h_out(3 * E), draft(V);
  m.forward(single_sequence_batch({1, 2, 3}, 0, false, MlaPathPolicy::Auto), cache, logits.data(), hidden.data());
  const auto trunk_planned = rec.planned.size();
  const int64_t tokens = m.path_counters().tokens_mha + m.path_counters().tokens_mqa;
  // The draft layer over positions 1..2 (it has no row at position 0): slot = position.
  BatchMeta mb;
  mb.token_ids = {2, 3};
  mb.positions = {1, 2};
  mb.slot_mapping = {1, 2};
  mb.seqs = {{.query_start = 0, .query_len = 2, .context_len = 2, .slots_start = 0}};
  mb.context_slots = {1, 2};
  mb.logits_rows = {1};
  m.forward_mtp(mb, hidden.data() + E, cache, draft.data(), h_out.data());
  ASSERT_EQ(rec.planned.size(), trunk_planned + 1);
  EXPECT_EQ(rec.planned.back(), (Recorder::Layer{b->config.n_layer, true}));
  EXPECT_EQ(rec.done.back(), (Recorder::Layer{b->config.n_layer, true}));
  EXPECT_EQ(m.path_counters().tokens_mha + m.path_counters().tokens_mqa, tokens);  // the MTP block is not counted
  EXPECT_EQ(rec.layer_ends.size(), static_cast<size_t>(b->config.n_layer));        // no trunk layer end for it
  EXPECT_FALSE(rec.bad_nesting);
}

// Multiply-adds per head (kernels/path_cost.cpp's rule), worked by hand at GLM-5 widths
// (kv_lora 512, qk_nope 192, qk_rope 64, v_head 256): decompressing or absorbing costs
// (192 + 256) * 512 = 229,376 per context row (MHA) or per query (MQA); a selected row costs 512
// (MHA) or 1,088 (MQA).
TEST(PathCost, SparsePathWeighsDecompressionAgainstSelectedRows) {
  // One decode query over 2,048 rows, 2,048 selected: MHA 2,048 * 229,376 + 2,048 * 512, MQA
  // 229,376 + 2,048 * 1,088.
  EXPECT_EQ(cheaper_sparse_path(512, 192, 64, 256, 1, 2048, 2048), MlaPath::Mqa);
  // A 512-token prefill chunk over its own 512 rows, 512 * 512 rows selected: both pay 512 *
  // 229,376 once; then 512 (MHA) against 1,088 (MQA) per selected row.
  EXPECT_EQ(cheaper_sparse_path(512, 192, 64, 256, 512, 512, 512 * 512), MlaPath::Mha);
  // A tie goes to MQA: query_len = context_len and no rows selected.
  EXPECT_EQ(cheaper_sparse_path(512, 192, 64, 256, 8, 8, 0), MlaPath::Mqa);
}

}  // namespace
}  // namespace mla
