#pragma once
// What every route of `mla serve` shares: the config, the model once it is loaded, the life
// cycle, the metrics and the jobs in flight; and the routes that belong to no protocol
// (register_server_routes: /health, /metrics, /version).
//
// Life cycle: the server answers from the start (/health 503, generation 503 "loading") until
// set_model(); begin_shutdown() makes new requests 503 while running ones finish; abort_all()
// ends those that are left (finish_reason "abort").
#include <atomic>
#include <cstdint>
#include <string>

#include "server/generation_job.h"
#include "server/metrics.h"
#include "server/served_model.h"

namespace mla::server {

class Router;

struct ApiConfig {
  std::string served_model_name;
  std::string model_path;  // shown as the model's "root"
};

class ServerState {
 public:
  explicit ServerState(ApiConfig config);

  void set_model(ServedModel model);  // ready: /health 200
  bool ready() const { return ready_.load(); }
  void begin_shutdown() { shutting_down_ = true; }
  bool shutting_down() const { return shutting_down_.load(); }
  // 503 while the model loads or the server shuts down: the start of every route that needs
  // the model.
  void require_ready() const;

  int n_active() const { return jobs_.size(); }  // generation requests not finished
  void abort_all() { jobs_.abort_all(); }

  const ApiConfig& config() const { return config_; }
  // Valid once ready().
  const ServedModel& model() const { return model_; }
  ServerMetrics& metrics() { return metrics_; }
  int64_t started_at() const { return started_at_; }  // unix seconds
  // What a GenerationJob uses (once ready()).
  JobServices job_services() { return {*model_.engine, metrics_, jobs_}; }

 private:
  ApiConfig config_;
  ServedModel model_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> shutting_down_{false};
  ServerMetrics metrics_;
  JobRegistry jobs_;
  const int64_t started_at_;
};

// /health (200 once ready, else 503), /metrics (Prometheus text) — both without the API key —
// and /version.
void register_server_routes(Router& router, ServerState& state);

// Seconds since the Unix epoch.
int64_t unix_now();

}  // namespace mla::server
