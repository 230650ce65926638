#pragma once
// /metrics in the Prometheus text exposition format (version 0.0.4): the engine's counters read
// at scrape time, plus what only the server sees (latency histograms, finished requests by
// reason). Every sample carries the label model_name.
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"

namespace mla::server {

inline constexpr std::string_view kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

// A fixed-bucket histogram (thread-safe). Bucket i counts observations <= bounds[i]; the +Inf
// bucket is implicit.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);  // strictly increasing, finite
  void observe(double v);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // per bound, observations <= it
    uint64_t count = 0;
    double sum = 0;
  };
  Snapshot snapshot() const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative), last = +Inf
  double sum_ = 0;
};

// Builds exposition text: a # HELP and # TYPE line per family, then its samples.
class PrometheusWriter {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;
  // type: "counter" | "gauge" | "histogram".
  void family(std::string_view name, std::string_view type, std::string_view help);
  void sample(std::string_view name, const Labels& labels, double value);
  void histogram(std::string_view name, const Labels& labels, const Histogram::Snapshot& h);
  const std::string& text() const { return out_; }

 private:
  std::string out_;
};

// Sample value: integers without a fraction, +Inf/-Inf/NaN spelled as Prometheus wants, other
// values round-trippable.
std::string prometheus_value(double v);
// Label value with \\, \" and \n escaped.
std::string prometheus_escape(std::string_view v);

class ServerMetrics {
 public:
  ServerMetrics();

  void observe_ttft(double seconds) { ttft_.observe(seconds); }
  void observe_tpot(double seconds) { tpot_.observe(seconds); }
  void observe_e2e(double seconds) { e2e_.observe(seconds); }

  std::string render(const EngineCounters& c, std::string_view model_name) const;

 private:
  Histogram ttft_, tpot_, e2e_;
};

}  // namespace mla::server
