// The router's own Prometheus metrics (/metrics): requests, retries, failures and
// refusals, end-to-end latency, requests per model, and each replica's state as
// the router sees it (ready, draining, breaker, load). Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "distllm/http/prometheus.h"
#include "distllm/router/replica_set.h"

namespace distllm::router {

class RouterMetrics {
 public:
  RouterMetrics();

  std::atomic<int64_t> requests{0};  // received on /v1/*completions
  std::atomic<int64_t> retries{0};   // attempts on another replica after a failure
  std::atomic<int64_t> failed{0};    // failed on every replica tried
  std::atomic<int64_t> rejected{0};  // refused before routing (bad JSON, unknown model)
  std::atomic<int64_t> unavailable{0};      // a known model with no live replica: 503
  std::atomic<int64_t> streams_broken{0};   // a replica broke off a stream: error event sent

  void observe_latency(double seconds);
  void count_model(const std::string& model);

  // The text of /metrics; `replicas` are listed with their state (a prefill
  // replica's URL carries " (prefill)").
  std::string render(const std::vector<ReplicaStatus>& replicas) const;

 private:
  mutable std::mutex mu_;
  http::Histogram latency_;
  std::map<std::string, int64_t> model_requests_;  // by the model forwarded to
};

}  // namespace distllm::router
