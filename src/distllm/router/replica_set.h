// The replicas behind the router: which can take traffic, and how loaded each is.
//
// A replica takes traffic when it is ready (its last active /health check passed),
// its circuit breaker lets requests through, and it is not draining. Breaker: after
// `failure_threshold` consecutive failures (connect errors or 5xx, seen on real
// requests or health checks) it opens for `open_seconds`; then it is half-open: one
// probe request may go, and its success closes the breaker (a failure reopens it).
//
// Health checks run every `health_interval_s`, all replicas at once, each bounded
// by `health_timeout_s`: a replica that accepts connections but does not answer (a
// hung or SIGSTOPped process) fails its check like one that is down, so it stops
// getting requests within interval + timeout. The models each replica listed are
// remembered while it is down, so a request for a model whose replicas are all
// down is told to retry (503), and only a model no replica ever served is unknown.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "distllm/router/policy.h"

namespace distllm::router {

struct ReplicaOptions {
  double health_interval_s = 1.0;
  double health_timeout_s = 2.0;
  int failure_threshold = 3;
  double open_seconds = 5.0;
};

enum class BreakerState { kClosed, kOpen, kHalfOpen };

// Whether a model can be served now.
enum class ModelState {
  kServed,   // a ready replica serves it (or lists no models, so may)
  kDown,     // no ready replica does, but one served it before, or a replica whose
             // models are not known yet is down: worth a retry
  kUnknown,  // every replica's models are known and none ever listed it
};
const char* breaker_name(BreakerState s);  // "closed", "open", "half_open"

struct ReplicaStatus {
  std::string url;
  bool ready = false;
  bool draining = false;
  BreakerState breaker = BreakerState::kClosed;
  int64_t outstanding = 0;
  int64_t requests = 0;  // sent there
  int64_t failures = 0;  // connect errors and 5xx
  int64_t queued = 0;    // the replica's waiting requests, from its /metrics
  double kv_usage = -1;  // its KV cache use (0 to 1) from its /metrics; -1: not reported
  nlohmann::ordered_json models;  // its /v1/models "data"
};

class ReplicaSet {
 public:
  // urls: "http://host:port". Throws distllm::Error for a malformed one.
  ReplicaSet(std::vector<std::string> urls, ReplicaOptions options);
  ~ReplicaSet();
  ReplicaSet(const ReplicaSet&) = delete;
  ReplicaSet& operator=(const ReplicaSet&) = delete;

  // Runs one round of health checks now, then keeps checking in the background.
  void start();
  void stop();

  int size() const { return static_cast<int>(replicas_.size()); }
  const std::string& url(int i) const { return replicas_[static_cast<size_t>(i)].url; }

  // Replicas that may take a request now, with their loads. `exclude`: replicas a
  // retry must avoid; `model` (when non-empty): only replicas that serve it (a
  // replica whose /v1/models could not be read is taken to serve any model).
  std::vector<ReplicaLoad> available(const std::vector<int>& exclude = {}, const std::string& model = {});
  // Whether any ready replica lists `model` (or lists nothing, see above).
  bool serves(const std::string& model) const;
  ModelState model_state(const std::string& model) const;
  // The replica with this URL (trailing slashes ignored), or -1.
  int find(const std::string& url) const;
  // Bookkeeping around one forwarded request.
  void on_start(int i);
  void on_finish(int i, bool ok);  // ok = a response that is not a 5xx
  // Ends a use whose outcome the router cannot judge (a prefill replica named to a
  // decode replica): only the in-flight count changes, the breaker is left alone.
  void on_release(int i);
  void set_draining(int i, bool draining);
  std::vector<ReplicaStatus> status() const;
  // The union of every ready replica's models (by id).
  nlohmann::ordered_json models() const;

 private:
  struct Replica {
    std::string url;
    bool ready = false;
    bool draining = false;
    BreakerState breaker = BreakerState::kClosed;
    double open_until = 0;
    bool probe_in_flight = false;
    int consecutive_failures = 0;
    int64_t outstanding = 0, requests = 0, failures = 0, queued = 0;
    double kv_usage = -1;
    nlohmann::ordered_json models = nlohmann::ordered_json::array();  // the last list read
    bool models_known = false;  // a list was read at least once
  };
  // One health check's findings (taken without the lock).
  struct Probe {
    bool ok = false;
    bool models_read = false;
    nlohmann::ordered_json models;
    int64_t queued = 0;
    double kv_usage = -1;
  };

  Probe probe(const std::string& url) const;
  void check_all();
  void record(Replica& r, bool ok, double now);  // under mu_
  static bool lists(const Replica& r, const std::string& model);
  void loop();

  ReplicaOptions options_;
  mutable std::mutex mu_;
  std::vector<Replica> replicas_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace distllm::router
