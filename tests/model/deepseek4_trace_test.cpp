// The deepseek4 dispatch trace (`--trace dispatch:N`): one line per layer and forward call at the
// attention branch, naming the layer's kind and what its queries read, checked against the layer
// schedule and sizes that transformers' config of the committed fixture states (reference.json).
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "../support/log_capture.h"
#include "model/deepseek4.h"
#include "util/trace.h"

namespace mla {
namespace {

using testing::CaptureLog;

std::string fixture(const std::string& file) {
  return std::string(MLA_SOURCE_DIR) + "/tests/fixtures/deepseek4/mixed/" + file;
}

struct TraceLine {
  int layer = 0;
  std::string kind, select;
  int64_t pos0 = 0, n_tok = 0, window = 0, entries = -1, sel_min = -1, sel_max = -1, top_k = -1;
};

std::vector<TraceLine> parse(const std::string& text) {
  static const std::regex re(
      R"(dispatch layer=blk\.(\d+) kind=(\w+) pos0=(\d+) n_tok=(\d+) window=(\d+)(?: entries=(\d+))?)"
      R"((?: selected=(\d+)\.\.(\d+) top_k=(\d+) select=(\w+))?\n)");
  std::vector<TraceLine> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    TraceLine l;
    l.layer = std::stoi(m[1]);
    l.kind = m[2];
    l.pos0 = std::stoll(m[3]);
    l.n_tok = std::stoll(m[4]);
    l.window = std::stoll(m[5]);
    if (m[6].matched) l.entries = std::stoll(m[6]);
    if (m[7].matched) {
      l.sel_min = std::stoll(m[7]);
      l.sel_max = std::stoll(m[8]);
      l.top_k = std::stoll(m[9]);
      l.select = m[10];
    }
    out.push_back(l);
  }
  return out;
}

struct Schedule {
  std::vector<std::string> kind;  // per layer: sliding, csa, hca
  std::map<std::string, int64_t> ratio;
  int64_t window = 0, top_k = 0;
};

// The fixture's schedule as transformers' config states it (not as our loader reads it).
Schedule schedule() {
  std::ifstream in(fixture("reference.json"));
  const nlohmann::json ref = nlohmann::json::parse(in);
  const nlohmann::json& cfg = ref["config"];
  const std::map<std::string, std::string> names = {{"sliding_attention", "sliding"},
                                                    {"compressed_sparse_attention", "csa"},
                                                    {"heavily_compressed_attention", "hca"}};
  Schedule s;
  for (const auto& t : cfg["layer_types"]) s.kind.push_back(names.at(t.get<std::string>()));
  s.ratio["csa"] = cfg["compress_rates"]["compressed_sparse_attention"].get<int64_t>();
  s.ratio["hca"] = cfg["compress_rates"]["heavily_compressed_attention"].get<int64_t>();
  s.window = cfg["sliding_window"].get<int64_t>();
  s.top_k = cfg["index_topk"].get<int64_t>();
  return s;
}

// What a chunk pos0 .. pos0 + n_tok - 1 of layer kind must report: the window rows its queries
// read (the cached W - 1 rows at most, and its own), the entries closed by its last token, and
// for CSA queries the entries w < (pos + 1) / m visible to each, at most top_k of them.
void expect_line(const TraceLine& l, const Schedule& s, bool dense) {
  const std::string& kind = s.kind.at(static_cast<size_t>(l.layer));
  SCOPED_TRACE("blk." + std::to_string(l.layer) + " pos0=" + std::to_string(l.pos0));
  EXPECT_EQ(l.kind, kind);
  EXPECT_EQ(l.window, std::min(l.pos0, s.window - 1) + l.n_tok);
  if (kind == "sliding") {
    EXPECT_EQ(l.entries, -1);
    return;
  }
  const int64_t m = s.ratio.at(kind), end = l.pos0 + l.n_tok;
  EXPECT_EQ(l.entries, end / m);
  if (kind == "hca") {
    EXPECT_EQ(l.sel_min, -1);
    return;
  }
  EXPECT_EQ(l.top_k, s.top_k);
  EXPECT_EQ(l.select, dense ? "all" : "indexer");
  const int64_t cap = dense ? INT64_MAX : s.top_k;
  EXPECT_EQ(l.sel_min, std::min((l.pos0 + 1) / m, cap));
  EXPECT_EQ(l.sel_max, std::min(end / m, cap));
  if (!dense) {
    EXPECT_LE(l.sel_max, s.top_k);
  }
}

struct Deepseek4Trace : ::testing::Test {
  void TearDown() override { trace_reset(); }
};

TEST_F(Deepseek4Trace, NamesEveryLayerWithItsKindAndSelection) {
  auto b = load_deepseek4(fixture("model-f32.gguf"));
  const Schedule s = schedule();
  ASSERT_EQ(static_cast<int64_t>(s.kind.size()), b->config.n_layer);
  Deepseek4Model model(b->config, b->weights, 2);
  Deepseek4Cache cache = model.make_cache();
  std::vector<float> logits(static_cast<size_t>(64 * b->config.n_vocab));
  // Chunks of 45 (more CSA entries than top_k: the indexer drops some), 7, 1 and 1 tokens; the
  // limit of 3 calls per layer leaves the last one out.
  const std::vector<int64_t> chunks = {45, 7, 1, 1};
  trace_configure("dispatch:3");
  CaptureLog cap;
  int32_t next = 0;
  for (int64_t n : chunks) {
    std::vector<int32_t> tokens;
    for (int64_t i = 0; i < n; ++i) tokens.push_back(next++ % static_cast<int32_t>(b->config.n_vocab));
    model.forward(tokens, cache, logits.data());
  }
  const std::vector<TraceLine> lines = parse(cap.text());
  ASSERT_EQ(lines.size(), 3 * s.kind.size()) << cap.text();
  std::map<int, std::vector<int64_t>> pos0_by_layer;
  for (const TraceLine& l : lines) {
    expect_line(l, s, /*dense=*/false);
    pos0_by_layer[l.layer].push_back(l.pos0);
  }
  for (int il = 0; il < static_cast<int>(s.kind.size()); ++il)
    EXPECT_EQ(pos0_by_layer[il], (std::vector<int64_t>{0, 45, 52})) << "blk." << il;
  // The first chunk's CSA queries at the end see 11 entries and keep top_k = 8 of them.
  bool saw_capped = false;
  for (const TraceLine& l : lines) saw_capped |= l.kind == "csa" && l.pos0 == 0 && l.sel_max == s.top_k;
  EXPECT_TRUE(saw_capped) << cap.text();
}

TEST_F(Deepseek4Trace, DenseCsaSaysItAttendsEveryEntry) {
  auto b = load_deepseek4(fixture("model-f32.gguf"));
  const Schedule s = schedule();
  Deepseek4Model model(b->config, b->weights, 2);
  model.set_csa_dense(true);
  Deepseek4Cache cache = model.make_cache();
  std::vector<float> logits(static_cast<size_t>(45 * b->config.n_vocab));
  trace_configure("dispatch:1");
  CaptureLog cap;
  model.forward(std::vector<int32_t>(45, 3), cache, logits.data());
  const std::vector<TraceLine> lines = parse(cap.text());
  ASSERT_EQ(lines.size(), s.kind.size()) << cap.text();
  for (const TraceLine& l : lines) expect_line(l, s, /*dense=*/true);
}

TEST_F(Deepseek4Trace, OffByDefault) {
  auto b = load_deepseek4(fixture("model-f32.gguf"));
  Deepseek4Model model(b->config, b->weights, 1);
  std::vector<float> logits(static_cast<size_t>(5 * b->config.n_vocab));
  trace_reset();
  CaptureLog cap;
  model.prefill({1, 2, 3, 4, 5}, logits.data());
  EXPECT_EQ(cap.text().find("dispatch"), std::string::npos) << cap.text();
}

}  // namespace
}  // namespace mla
