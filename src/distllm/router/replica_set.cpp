#include "distllm/router/replica_set.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <regex>
#include <thread>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"
#include "distllm/base/timer.h"

namespace distllm::router {
namespace {

using Json = nlohmann::ordered_json;

// A gauge such as `distllm:num_requests_waiting{...} 3` from Prometheus text, by
// the end of its name (vLLM's names: num_requests_waiting, kv_cache_usage_perc, or
// gpu_cache_usage_perc in older vLLM); -1 when absent.
double scrape_gauge(const std::string& metrics, const char* name_suffix) {
  const std::regex re(std::string(R"((?:^|\n)\S*)") + name_suffix + R"((?:\{[^}]*\})? ([0-9.eE+-]+))");
  std::smatch m;
  if (!std::regex_search(metrics, m, re)) return -1;
  return std::stod(m[1].str());
}

}  // namespace

const char* breaker_name(BreakerState s) {
  switch (s) {
    case BreakerState::kClosed: return "closed";
    case BreakerState::kOpen: return "open";
    case BreakerState::kHalfOpen: return "half_open";
  }
  return "?";
}

ReplicaSet::ReplicaSet(std::vector<std::string> urls, ReplicaOptions options) : options_(options) {
  DL_CHECK(!urls.empty(), "the router needs at least one --replica");
  DL_CHECK(options.failure_threshold >= 1 && options.open_seconds > 0 && options.health_interval_s > 0,
           "router: failure threshold, open time and health interval must be positive");
  for (auto& u : urls) {
    DL_CHECK(u.rfind("http://", 0) == 0 && u.size() > 7, "--replica '%s' must be an http://host:port URL", u.c_str());
    while (!u.empty() && u.back() == '/') u.pop_back();
    Replica r;
    r.url = u;
    replicas_.push_back(std::move(r));
  }
}

ReplicaSet::~ReplicaSet() { stop(); }

void ReplicaSet::start() {
  check_all();
  thread_ = std::thread([this] { loop(); });
}

void ReplicaSet::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ReplicaSet::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::duration<double>(options_.health_interval_s));
    if (stop_) break;
    lock.unlock();
    check_all();
    lock.lock();
  }
}

ReplicaSet::Probe ReplicaSet::probe(const std::string& url) const {
  Probe p;
  httplib::Client cli(url);
  const auto t = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(options_.health_timeout_s));
  cli.set_connection_timeout(t);
  cli.set_read_timeout(t);
  cli.set_write_timeout(t);
  auto health = cli.Get("/health");
  p.ok = health && health->status == 200;
  if (!p.ok) return p;
  if (auto m = cli.Get("/v1/models"); m && m->status == 200) {
    Json j = Json::parse(m->body, nullptr, false);
    if (j.is_object() && j.contains("data") && j["data"].is_array()) {
      p.models = j["data"];
      p.models_read = true;
    }
  }
  if (auto m = cli.Get("/metrics"); m && m->status == 200) {
    p.queued = std::max<int64_t>(0, static_cast<int64_t>(scrape_gauge(m->body, "num_requests_waiting")));
    p.kv_usage = scrape_gauge(m->body, "kv_cache_usage_perc");
    if (p.kv_usage < 0) p.kv_usage = scrape_gauge(m->body, "gpu_cache_usage_perc");
  }
  return p;
}

void ReplicaSet::check_all() {
  // All at once: a replica that hangs costs the round one timeout, not one per replica.
  std::vector<Probe> probes(replicas_.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < replicas_.size(); ++i)
    threads.emplace_back([this, i, &probes] { probes[i] = probe(replicas_[i].url); });  // urls never change
  for (auto& t : threads) t.join();
  std::lock_guard<std::mutex> lock(mu_);
  const double now = now_seconds();
  for (size_t i = 0; i < replicas_.size(); ++i) {
    Replica& r = replicas_[i];
    Probe& p = probes[i];
    r.ready = p.ok;
    if (p.models_read) {
      r.models = std::move(p.models);
      r.models_known = true;
    }
    r.queued = p.queued;
    r.kv_usage = p.kv_usage;
    if (!p.ok) {
      record(r, false, now);
      continue;
    }
    if (r.breaker == BreakerState::kOpen && now >= r.open_until) {
      r.breaker = BreakerState::kHalfOpen;  // healthy again: let a probe through
    }
  }
}

void ReplicaSet::record(Replica& r, bool ok, double now) {
  if (ok) {
    r.consecutive_failures = 0;
    if (r.breaker != BreakerState::kClosed) r.breaker = BreakerState::kClosed;
    return;
  }
  ++r.failures;
  ++r.consecutive_failures;
  if (r.breaker == BreakerState::kHalfOpen || r.consecutive_failures >= options_.failure_threshold) {
    r.breaker = BreakerState::kOpen;
    r.open_until = now + options_.open_seconds;
  }
}

bool ReplicaSet::lists(const Replica& r, const std::string& model) {
  if (model.empty() || r.models.empty()) return true;
  for (const auto& m : r.models)
    if (m.is_object() && m.contains("id") && m["id"] == model) return true;
  return false;
}

bool ReplicaSet::serves(const std::string& model) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Replica& r : replicas_)
    if (r.ready && lists(r, model)) return true;
  return false;
}

ModelState ReplicaSet::model_state(const std::string& model) const {
  std::lock_guard<std::mutex> lock(mu_);
  bool down = false;
  for (const Replica& r : replicas_) {
    if (r.ready && lists(r, model)) return ModelState::kServed;
    if (!r.models_known || lists(r, model)) down = true;
  }
  return down ? ModelState::kDown : ModelState::kUnknown;
}

int ReplicaSet::find(const std::string& url) const {
  std::string u = url;
  while (!u.empty() && u.back() == '/') u.pop_back();
  for (size_t i = 0; i < replicas_.size(); ++i)
    if (replicas_[i].url == u) return static_cast<int>(i);
  return -1;
}

std::vector<ReplicaLoad> ReplicaSet::available(const std::vector<int>& exclude, const std::string& model) {
  std::lock_guard<std::mutex> lock(mu_);
  const double now = now_seconds();
  std::vector<ReplicaLoad> out;
  for (size_t i = 0; i < replicas_.size(); ++i) {
    Replica& r = replicas_[i];
    if (std::find(exclude.begin(), exclude.end(), static_cast<int>(i)) != exclude.end()) continue;
    if (!r.ready || r.draining || !lists(r, model)) continue;
    if (r.breaker == BreakerState::kOpen) {
      if (now < r.open_until) continue;
      r.breaker = BreakerState::kHalfOpen;
    }
    if (r.breaker == BreakerState::kHalfOpen && r.probe_in_flight) continue;
    out.push_back({static_cast<int>(i), r.outstanding, r.queued});
  }
  return out;
}

void ReplicaSet::on_start(int i) {
  std::lock_guard<std::mutex> lock(mu_);
  Replica& r = replicas_[static_cast<size_t>(i)];
  ++r.outstanding;
  ++r.requests;
  if (r.breaker == BreakerState::kHalfOpen) r.probe_in_flight = true;
}

void ReplicaSet::on_finish(int i, bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  Replica& r = replicas_[static_cast<size_t>(i)];
  --r.outstanding;
  r.probe_in_flight = false;
  record(r, ok, now_seconds());
  if (!ok) r.ready = r.consecutive_failures < options_.failure_threshold && r.ready;
}

void ReplicaSet::on_release(int i) {
  std::lock_guard<std::mutex> lock(mu_);
  Replica& r = replicas_[static_cast<size_t>(i)];
  --r.outstanding;
  r.probe_in_flight = false;
}

void ReplicaSet::set_draining(int i, bool draining) {
  std::lock_guard<std::mutex> lock(mu_);
  replicas_[static_cast<size_t>(i)].draining = draining;
}

std::vector<ReplicaStatus> ReplicaSet::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ReplicaStatus> out;
  for (const Replica& r : replicas_)
    out.push_back(
        {r.url, r.ready, r.draining, r.breaker, r.outstanding, r.requests, r.failures, r.queued, r.kv_usage, r.models});
  return out;
}

Json ReplicaSet::models() const {
  std::lock_guard<std::mutex> lock(mu_);
  Json out = Json::array();
  for (const Replica& r : replicas_) {
    if (!r.ready) continue;
    for (const auto& m : r.models) {
      bool seen = false;
      for (const auto& o : out) seen = seen || (o.contains("id") && m.contains("id") && o["id"] == m["id"]);
      if (!seen) out.push_back(m);
    }
  }
  return out;
}

}  // namespace distllm::router
