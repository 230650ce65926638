#include "server/metrics.h"

#include <fmt/format.h>

#include <cassert>
#include <cmath>
#include <string>

namespace mla::server {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    assert(std::isfinite(bounds_[i]));
    assert(i == 0 || bounds_[i] > bounds_[i - 1]);
  }
  counts_.assign(bounds_.size() + 1, 0);
}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && !(v <= bounds_[i])) ++i;
  std::lock_guard lk(mu_);
  ++counts_[i];
  sum_ += v;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  std::lock_guard lk(mu_);
  s.bounds = bounds_;
  uint64_t acc = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    acc += counts_[i];
    s.cumulative.push_back(acc);
  }
  s.count = acc + counts_.back();
  s.sum = sum_;
  return s;
}

std::string prometheus_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::floor(v) == v && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{}", v);  // shortest round-trip form
}

std::string prometheus_escape(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

void PrometheusWriter::family(std::string_view name, std::string_view type, std::string_view help) {
  std::string h;
  for (char c : help) h += c == '\n' ? std::string("\\n") : c == '\\' ? std::string("\\\\") : std::string(1, c);
  out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, h, name, type);
}

void PrometheusWriter::sample(std::string_view name, const Labels& labels, double value) {
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i) out_ += ',';
      out_ += fmt::format("{}=\"{}\"", labels[i].first, prometheus_escape(labels[i].second));
    }
    out_ += '}';
  }
  out_ += ' ';
  out_ += prometheus_value(value);
  out_ += '\n';
}

void PrometheusWriter::histogram(std::string_view name, const Labels& labels, const Histogram::Snapshot& h) {
  const std::string bucket = fmt::format("{}_bucket", name);
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    Labels l = labels;
    l.emplace_back("le", prometheus_value(h.bounds[i]));
    sample(bucket, l, static_cast<double>(h.cumulative[i]));
  }
  Labels l = labels;
  l.emplace_back("le", "+Inf");
  sample(bucket, l, static_cast<double>(h.count));
  sample(fmt::format("{}_sum", name), labels, h.sum);
  sample(fmt::format("{}_count", name), labels, static_cast<double>(h.count));
}

// Bucket bounds in seconds: from a fast CPU decode step to a long queue wait.
ServerMetrics::ServerMetrics()
    : ttft_({0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640}),
      tpot_({0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 10, 20}),
      e2e_({0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 20, 30, 60, 120, 240, 480, 960, 1920}) {}

namespace {

// The prefix cache's lower tiers (--kv-cache-host-bytes, --kv-cache-dir): block lookups by tier,
// bytes held, tokens loaded, the disk writer's and reader's counts.
void write_tier_metrics(PrometheusWriter& w, const PrometheusWriter::Labels& m, const EngineCounters& c) {
  auto with = [&](const char* k, std::string v) {
    PrometheusWriter::Labels l = m;
    l.emplace_back(k, std::move(v));
    return l;
  };
  auto counter = [&](const char* name, const char* help, int64_t n) {
    w.family(name, "counter", help);
    w.sample(name, m, static_cast<double>(n));
  };
  auto by_tier = [&](const char* name, const char* type, const char* help, double host, double disk) {
    w.family(name, type, help);
    w.sample(name, with("tier", "host"), host);
    w.sample(name, with("tier", "disk"), disk);
  };
  by_tier("mla:prefix_cache_tier_hits_total", "counter",
          "KV blocks found in a lower tier of the prefix cache (host RAM, disk) after the KV cache's own ran out.",
          static_cast<double>(c.n_tier_host_hits), static_cast<double>(c.n_tier_disk_hits));
  by_tier("mla:prefix_cache_tier_misses_total", "counter", "Block lookups that found no block in that tier.",
          static_cast<double>(c.n_tier_host_misses), static_cast<double>(c.n_tier_disk_misses));
  by_tier("mla:prefix_cache_tier_bytes", "gauge", "Bytes of KV blocks each lower tier holds.",
          static_cast<double>(c.tier_host_bytes_used), static_cast<double>(c.tier_disk_bytes_used));
  counter("mla:prefix_cache_tier_tokens_loaded_total",
          "Prompt tokens whose KV was loaded from a lower tier instead of computed (prefill saved).",
          c.n_tier_tokens_loaded);
  counter("mla:prefix_cache_disk_read_bytes_total", "Bytes of block files read back from --kv-cache-dir.",
          c.tier_disk_bytes_read);
  counter("mla:prefix_cache_disk_written_bytes_total", "Bytes of block files written to --kv-cache-dir.",
          c.tier_disk_bytes_written);
  counter("mla:prefix_cache_disk_writes_dropped_total",
          "Blocks not written to disk because the background writer's queue was full.", c.n_tier_writes_dropped);
  counter("mla:prefix_cache_disk_write_errors_total",
          "Blocks not written to disk because the write failed (a full disk, a read-only directory).",
          c.n_tier_write_errors);
  counter("mla:prefix_cache_disk_files_rejected_total",
          "Block files skipped and deleted: corrupt, truncated, another model's, or left by an unfinished write.",
          c.n_tier_files_rejected);
}

}  // namespace

std::string ServerMetrics::render(const EngineCounters& c, std::string_view model_name) const {
  PrometheusWriter w;
  const PrometheusWriter::Labels m = {{"model_name", std::string(model_name)}};
  auto with = [&](const char* k, std::string v) {
    PrometheusWriter::Labels l = m;
    l.emplace_back(k, std::move(v));
    return l;
  };
  auto one = [&](const char* name, const char* type, const char* help, double v) {
    w.family(name, type, help);
    w.sample(name, m, v);
  };
  // The engine's event counts are int64_t; a sample is a double (exact below 2^53).
  auto counter = [&](const char* name, const char* help, int64_t n) {
    one(name, "counter", help, static_cast<double>(n));
  };
  one("mla:num_requests_running", "gauge", "Sequences in the engine's running set.", c.n_running);
  one("mla:num_requests_waiting", "gauge", "Sequences waiting to be scheduled (new or preempted).", c.n_waiting);
  one("mla:kv_cache_usage_perc", "gauge", "Fraction of KV cache blocks in use (0 to 1).", c.kv_usage);
  counter("mla:prompt_tokens_total", "Prompt tokens of admitted requests.", c.n_prompt_tokens);
  counter("mla:generation_tokens_total", "Generated tokens.", c.n_generation_tokens);

  w.family("mla:request_success_total", "counter", "Finished requests by finish reason.");
  for (const auto& [reason, n] : {std::pair{"stop", c.n_finished_stop}, std::pair{"length", c.n_finished_length},
                                  std::pair{"abort", c.n_finished_abort}, std::pair{"error", c.n_finished_error}})
    w.sample("mla:request_success_total", with("finished_reason", reason), static_cast<double>(n));
  counter("mla:num_preemptions_total", "Sequences preempted (recomputed later).", c.n_preemptions);
  counter("mla:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", c.n_prefix_queries);
  counter("mla:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.", c.n_prefix_hits);
  write_tier_metrics(w, m, c);
  if (c.expert_cache_slots > 0) {  // --weights-memory
    one("mla:expert_cache_slots", "gauge", "Routed experts the expert cache holds at once (--weights-memory).",
        static_cast<double>(c.expert_cache_slots));
    counter("mla:expert_cache_hits_total", "Routed (layer, expert) lookups found in the expert cache.",
            c.n_expert_cache_hits);
    counter("mla:expert_cache_misses_total",
            "Routed (layer, expert) lookups the forward pass read from the model file.", c.n_expert_cache_misses);
    counter("mla:expert_cache_read_bytes_total", "Model file bytes read into the expert cache (on demand and ahead).",
            c.expert_cache_bytes_read);
    one("mla:expert_cache_stall_seconds_total", "counter",
        "Wall time the forward pass waited for routed experts (on-demand reads, reads ahead in flight).",
        c.expert_cache_stall_seconds);
    counter("mla:expert_cache_read_ahead_total", "Routed experts the read-ahead I/O threads read.",
            c.n_expert_cache_read_ahead);
    counter("mla:expert_cache_read_ahead_bytes_total", "Model file bytes read ahead (part of read_bytes_total).",
            c.expert_cache_read_ahead_bytes);
    counter("mla:expert_cache_predictions_total", "(layer, expert) pairs the read-ahead predicted.",
            c.n_expert_cache_predictions);
    counter("mla:expert_cache_predictions_used_total", "Predicted (layer, expert) pairs the layer then used.",
            c.n_expert_cache_predictions_used);
    counter("mla:expert_cache_predictable_uses_total",
            "(layer, expert) pairs used by a layer that had a prediction (recall: predictions_used / this).",
            c.n_expert_cache_predictable_uses);
  }
  w.family("mla:attention_path_tokens_total", "counter",
           "Tokens attended through each MLA path (mha: decompressed, mqa: absorbed).");
  w.sample("mla:attention_path_tokens_total", with("path", "mha"), static_cast<double>(c.n_tokens_mha));
  w.sample("mla:attention_path_tokens_total", with("path", "mqa"), static_cast<double>(c.n_tokens_mqa));
  if (!c.n_spec_accepted_per_pos.empty()) {  // speculative decoding configured (vLLM's spec_decode names)
    counter("mla:spec_decode_num_drafts_total", "Speculative verify steps that carried drafts (per sequence).",
            c.n_spec_drafts);
    counter("mla:spec_decode_num_draft_tokens_total", "Draft tokens proposed by the MTP layer and verified.",
            c.n_spec_draft_tokens);
    counter("mla:spec_decode_num_accepted_tokens_total", "Draft tokens accepted.", c.n_spec_accepted_tokens);
    w.family("mla:spec_decode_num_accepted_tokens_per_pos_total", "counter",
             "Draft tokens accepted by draft position (0: the first draft of a step).");
    for (size_t i = 0; i < c.n_spec_accepted_per_pos.size(); ++i)
      w.sample("mla:spec_decode_num_accepted_tokens_per_pos_total", with("position", std::to_string(i)),
               static_cast<double>(c.n_spec_accepted_per_pos[i]));
  }
  counter("mla:sparse_attention_layer_tokens_total",
          "DSA: tokens attended through sparse (indexer top-k) layers, summed over those layers.",
          c.n_sparse_layer_tokens);
  counter("mla:sparse_attention_selected_rows_total",
          "DSA: context rows the lightning indexer selected for those tokens (their attention cost).",
          c.n_sparse_selected_rows);

  w.family("mla:time_to_first_token_seconds", "histogram", "Time from request arrival to its first generated token.");
  w.histogram("mla:time_to_first_token_seconds", m, ttft_.snapshot());
  w.family("mla:time_per_output_token_seconds", "histogram",
           "Time between consecutive generated tokens of a sequence.");
  w.histogram("mla:time_per_output_token_seconds", m, tpot_.snapshot());
  w.family("mla:e2e_request_latency_seconds", "histogram", "Time from request arrival to its last output.");
  w.histogram("mla:e2e_request_latency_seconds", m, e2e_.snapshot());
  return w.text();
}

}  // namespace mla::server
