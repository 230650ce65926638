#include "util/trace.h"

#include <atomic>
#include <charconv>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>

#include "util/env.h"
#include "util/error.h"
#include "util/log.h"

namespace mla {
namespace {

struct TraceState {
  std::atomic<int> dispatch_limit{0};
  std::atomic<int> tiers_limit{0};
  std::atomic<int> tiers_calls{0};
  std::mutex mu;                                // guards dispatch_calls
  std::unordered_map<int, int> dispatch_calls;  // layer -> calls seen so far
};

TraceState& state() {
  static TraceState s;
  return s;
}

int parse_count(std::string_view name, std::string_view value) {
  int n = 0;
  auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (ec != std::errc() || p != value.data() + value.size() || n < 0)
    fail("trace: '{}:{}': expected a non-negative integer count after '{}:'", name, value, name);
  return n;
}

}  // namespace

void trace_configure(std::string_view spec) {
  int dispatch = 0, tiers = 0;
  while (!spec.empty()) {
    size_t comma = spec.find(',');
    std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view{} : spec.substr(comma + 1);
    if (item.empty()) continue;
    size_t colon = item.find(':');
    std::string_view name = item.substr(0, colon);
    std::string_view value = colon == std::string_view::npos ? std::string_view{} : item.substr(colon + 1);
    if (name == "dispatch") {
      if (value.empty()) fail("trace: 'dispatch' needs a count, e.g. dispatch:8");
      dispatch = parse_count(name, value);
    } else if (name == "tiers") {
      if (value.empty()) fail("trace: 'tiers' needs a count, e.g. tiers:8");
      tiers = parse_count(name, value);
    } else {
      fail("trace: unknown item '{}' (known: dispatch:N, tiers:N)", name);
    }
  }
  auto& s = state();
  std::lock_guard lock(s.mu);
  s.dispatch_calls.clear();
  s.dispatch_limit.store(dispatch);
  s.tiers_calls.store(0);
  s.tiers_limit.store(tiers);
}

void trace_configure_from_env() {
  if (auto env = env_value("MLA_TRACE")) trace_configure(*env);
}

void trace_reset() { trace_configure(""); }

int trace_dispatch_limit() { return state().dispatch_limit.load(std::memory_order_relaxed); }

int trace_tiers_limit() { return state().tiers_limit.load(std::memory_order_relaxed); }

void trace_tiers(int n_full, int n_arena, int n_host, int n_disk, int n_reused) {
  auto& s = state();
  const int limit = s.tiers_limit.load(std::memory_order_relaxed);
  if (limit <= 0 || s.tiers_calls.fetch_add(1, std::memory_order_relaxed) >= limit) return;
  log().info("tiers lookup blocks={} arena={} host={} disk={} reused={}", n_full, n_arena, n_host, n_disk, n_reused);
}

namespace {

// Whether this call of layer is within the dispatch limit (and counts it).
bool take_dispatch_call(int layer) {
  auto& s = state();
  const int limit = s.dispatch_limit.load(std::memory_order_relaxed);
  if (limit <= 0) return false;
  std::lock_guard lock(s.mu);
  int& calls = s.dispatch_calls[layer];
  if (calls >= limit) return false;
  ++calls;
  return true;
}

}  // namespace

void trace_dispatch(int layer, bool is_sparse, int num_mqa, int num_mha, int total_toks, std::string_view policy,
                    int64_t index_topk, int64_t selected, int verify_mqa, int verify_mha) {
  if (!take_dispatch_call(layer)) return;
  const std::string verify =
      verify_mqa + verify_mha > 0 ? fmt::format(" verify_mqa={} verify_mha={}", verify_mqa, verify_mha) : "";
  if (is_sparse)
    log().info(
        "dispatch layer=blk.{} is_sparse=1 num_mqa={} num_mha={} total_toks={} index_topk={} selected={} policy={}{}",
        layer, num_mqa, num_mha, total_toks, index_topk, selected, policy, verify);
  else
    log().info("dispatch layer=blk.{} is_sparse=0 num_mqa={} num_mha={} total_toks={} policy={}{}", layer, num_mqa,
               num_mha, total_toks, policy, verify);
}

void trace_ds4_dispatch(const Ds4DispatchTrace& t) {
  if (!take_dispatch_call(t.layer)) return;
  std::string line = fmt::format("dispatch layer=blk.{} kind={} pos0={} n_tok={} window={}", t.layer, t.kind, t.pos0,
                                 t.n_tok, t.window_rows);
  if (t.n_entries >= 0) line += fmt::format(" entries={}", t.n_entries);
  if (t.selected_min >= 0)
    line += fmt::format(" selected={}..{} top_k={} select={}", t.selected_min, t.selected_max, t.top_k,
                        t.select_all ? "all" : "indexer");
  log().info("{}", line);
}

}  // namespace mla
