#include "distllm/router/metrics.h"

#include "distllm/base/strings.h"

namespace distllm::router {

RouterMetrics::RouterMetrics() : latency_({0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}) {}

void RouterMetrics::observe_latency(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  latency_.observe(seconds);
}

void RouterMetrics::count_model(const std::string& model) {
  std::lock_guard<std::mutex> lock(mu_);
  ++model_requests_[model];
}

std::string RouterMetrics::render(const std::vector<ReplicaStatus>& replicas) const {
  http::PrometheusText t;
  t.counter("distllm_router_requests_total", "Requests the router received on /v1/*completions.", requests.load());
  t.counter("distllm_router_retries_total", "Attempts on another replica after a failure.", retries.load());
  t.counter("distllm_router_failures_total", "Requests that failed on every replica tried.", failed.load());
  t.counter("distllm_router_rejected_total", "Requests refused before routing (bad JSON, unknown model).",
            rejected.load());
  t.counter("distllm_router_model_unavailable_total",
            "Requests for a model a replica served before while none that serves it is up (503 + Retry-After).",
            unavailable.load());
  t.counter("distllm_router_streams_broken_total",
            "Streams a replica broke off mid-way: the client got an error event and [DONE].", streams_broken.load());
  {
    std::lock_guard<std::mutex> lock(mu_);
    t.histogram("distllm_router_request_seconds", "End-to-end latency through the router.", latency_);
    const char* n = "distllm_router_model_requests_total";
    t.family(n, "counter", "Requests by the model they were sent to (after splits).");
    for (const auto& [model, count] : model_requests_)
      t.sample(n, "model=\"" + escape_prometheus_label(model) + "\"", count);
  }
  // One family at a time, a sample per replica.
  auto per_replica = [&](const char* name, const char* type, const char* help, auto value) {
    t.family(name, type, help);
    for (const ReplicaStatus& s : replicas) {
      const std::string label = "replica=\"" + escape_prometheus_label(s.url) + "\"";
      value(name, label, s);
    }
  };
  auto flag = [&](const char* name, const char* help, bool ReplicaStatus::*field) {
    per_replica(name, "gauge", help, [&](const char* n, const std::string& l, const ReplicaStatus& s) {
      t.sample(n, l, int64_t{s.*field ? 1 : 0});
    });
  };
  auto count = [&](const char* name, const char* type, const char* help, int64_t ReplicaStatus::*field) {
    per_replica(name, type, help,
                [&](const char* n, const std::string& l, const ReplicaStatus& s) { t.sample(n, l, s.*field); });
  };
  flag("distllm_router_replica_ready", "1 when the replica's last health check passed.", &ReplicaStatus::ready);
  flag("distllm_router_replica_draining", "1 while the replica is drained (no new requests).", &ReplicaStatus::draining);
  count("distllm_router_replica_queued", "gauge", "Requests waiting on the replica (from its /metrics).",
        &ReplicaStatus::queued);
  per_replica("distllm_router_replica_kv_cache_usage", "gauge", "The replica's KV cache use, 0 to 1 (from its /metrics).",
              [&](const char* n, const std::string& l, const ReplicaStatus& s) {
                if (s.kv_usage >= 0) t.sample(n, l, s.kv_usage);  // not every server reports it
              });
  count("distllm_router_replica_outstanding", "gauge", "Requests this router has in flight on the replica.",
        &ReplicaStatus::outstanding);
  count("distllm_router_replica_requests_total", "counter", "Requests this router sent to the replica.",
        &ReplicaStatus::requests);
  count("distllm_router_replica_failures_total", "counter", "Connect errors, timeouts and 5xx from the replica.",
        &ReplicaStatus::failures);
  per_replica("distllm_router_replica_breaker", "gauge", "The replica's circuit breaker state (1 for the current one).",
              [&](const char* n, const std::string& l, const ReplicaStatus& s) {
                for (BreakerState st : {BreakerState::kClosed, BreakerState::kOpen, BreakerState::kHalfOpen})
                  t.sample(n, l + ",state=\"" + breaker_name(st) + "\"", int64_t{s.breaker == st ? 1 : 0});
              });
  return std::move(t.text());
}

}  // namespace distllm::router
