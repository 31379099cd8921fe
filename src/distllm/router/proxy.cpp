#include "distllm/router/proxy.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <random>

#include <nlohmann/json.hpp>

#include "distllm/base/error.h"
#include "distllm/base/log.h"
#include "distllm/base/strings.h"
#include "distllm/base/timer.h"
#include "distllm/router/prefill_pool.h"

namespace distllm::router {
namespace {

using Json = nlohmann::ordered_json;

Json error_json(const std::string& message, const char* type, const char* code) {
  return Json{{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", code}}}};
}

void send_error(httplib::Response& res, int status, const std::string& message, const char* code) {
  const char* type = status == 401 ? "authentication_error" : status >= 500 ? "server_error" : "invalid_request_error";
  res.status = status;
  res.set_content(error_json(message, type, code).dump(), "application/json");
}

// The text a prompt-prefix policy hashes: the prompt, or the messages' contents.
std::string prompt_text(const Json& body) {
  std::string out;
  if (auto p = body.find("prompt"); p != body.end()) {
    if (p->is_string()) return p->get<std::string>();
    return p->dump();
  }
  if (auto m = body.find("messages"); m != body.end() && m->is_array()) {
    for (const auto& msg : *m) {
      if (!msg.is_object()) continue;
      if (auto r = msg.find("role"); r != msg.end() && r->is_string()) out += r->get<std::string>() + ":";
      if (auto c = msg.find("content"); c != msg.end()) out += c->is_string() ? c->get<std::string>() : c->dump();
      out += "\n";
    }
  }
  return out;
}

std::string new_request_id() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return strprintf("route-%016llx", static_cast<unsigned long long>(rng()));
}

// Latency histogram buckets (seconds), Prometheus style.
constexpr double kBuckets[] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
constexpr size_t kNumBuckets = sizeof kBuckets / sizeof kBuckets[0];

}  // namespace

struct Router::Impl {
  RouterConfig config;
  ReplicaSet replicas;
  std::unique_ptr<RoutingPolicy> policy;
  std::unique_ptr<PrefillPool> prefill;  // set with --prefill
  httplib::Server server;
  std::atomic<int64_t> requests{0}, retries{0}, failed{0}, rejected{0};
  std::atomic<int64_t> latency_count{0};
  std::atomic<int64_t> latency_buckets[kNumBuckets + 1] = {};
  std::atomic<double> latency_sum{0.0};

  explicit Impl(RouterConfig c)
      : config(std::move(c)),
        replicas(config.replicas, config.replica),
        policy(make_policy(config.policy, static_cast<int>(config.replicas.size()))) {
    DL_CHECK(config.max_attempts >= 1, "--max-attempts must be at least 1");
    if (!config.prefill_replicas.empty()) prefill = std::make_unique<PrefillPool>(config.prefill_replicas, config.replica);
    server.new_task_queue = [n = config.threads] { return new httplib::ThreadPool(static_cast<size_t>(n)); };
    server.set_payload_max_length(config.max_body_bytes);
    server.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      const size_t n = replicas.available().size();
      res.status = n > 0 ? 200 : 503;
      res.set_content(Json{{"status", n > 0 ? "ok" : "no replica available"}, {"available_replicas", n}}.dump(),
                      "application/json");
    });
    server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_text(), "text/plain; version=0.0.4");
    });
    server.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res)) return;
      res.set_content(Json{{"object", "list"}, {"data", replicas.models()}}.dump(), "application/json");
    });
    for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
      server.Post(path, [this, path](const httplib::Request& req, httplib::Response& res) { proxy(path, req, res); });
    }
    server.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (res.status == 413) send_error(res, 413, "the request body is larger than the router's limit", "body_too_large");
      else if (res.status == 404 && res.body.empty()) send_error(res, 404, "no such route", "not_found");
    });
  }

  bool authorized(const httplib::Request& req, httplib::Response& res) {
    if (config.api_key.empty() || req.get_header_value("Authorization") == "Bearer " + config.api_key) return true;
    send_error(res, 401, "missing or wrong API key for the router", "invalid_api_key");
    return false;
  }

  void observe(double seconds) {
    size_t b = 0;
    while (b < kNumBuckets && seconds > kBuckets[b]) ++b;
    latency_buckets[b].fetch_add(1);
    latency_count.fetch_add(1);
    double cur = latency_sum.load();
    while (!latency_sum.compare_exchange_weak(cur, cur + seconds)) {
    }
  }

  void proxy(const char* path, const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    requests.fetch_add(1);
    Json body = Json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object()) {
      rejected.fetch_add(1);
      send_error(res, 400, "the request body must be a JSON object", "invalid_json");
      return;
    }
    RouteKey key;
    key.prompt = prompt_text(body);
    key.session = req.get_header_value("X-Session-Id");
    if (key.session.empty()) {
      if (auto u = body.find("user"); u != body.end() && u->is_string()) key.session = u->get<std::string>();
    }
    const bool stream = body.value("stream", false);
    std::string request_id = req.get_header_value("X-Request-Id");
    if (request_id.empty()) request_id = new_request_id();
    httplib::Headers headers = {{"X-Request-Id", request_id}};
    res.set_header("X-Request-Id", request_id);
    std::shared_ptr<PrefillPool::Lease> prefill_lease = name_prefill_replica(headers);
    if (!stream) {
      forward(path, req.body, headers, key, res);
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    auto started = std::make_shared<Timer>();
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, path, payload = req.body, headers, key, started, prefill_lease](size_t, httplib::DataSink& sink) {
          forward_stream(path, payload, headers, key, sink);
          observe(started->seconds());
          sink.done();
          return true;
        });
  }

  // Disaggregation: names the prefill replica the decode replica pulls the
  // prompt's KV from (none when no prefill replica is ready or none is configured).
  std::shared_ptr<PrefillPool::Lease> name_prefill_replica(httplib::Headers& headers) {
    if (!prefill) return nullptr;
    std::shared_ptr<PrefillPool::Lease> lease = prefill->acquire();
    if (lease) headers.emplace(kPrefillFromHeader, lease->url());
    return lease;
  }

  // Picks a replica no earlier attempt used; -1 when none is left.
  int choose(const RouteKey& key, const std::vector<int>& tried) {
    std::vector<ReplicaLoad> a = replicas.available(tried);
    if (a.empty()) return -1;
    return policy->pick(key, a);
  }

  httplib::Client client(int replica) {
    httplib::Client cli(replicas.url(replica));
    cli.set_connection_timeout(std::chrono::seconds(5));
    const auto t = std::chrono::duration<double>(config.upstream_timeout_s);
    cli.set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(t));
    cli.set_write_timeout(std::chrono::duration_cast<std::chrono::microseconds>(t));
    return cli;
  }

  void forward(const char* path, const std::string& payload, const httplib::Headers& headers, const RouteKey& key,
               httplib::Response& res) {
    Timer t;
    std::vector<int> tried;
    for (int attempt = 0; attempt < config.max_attempts; ++attempt) {
      const int r = choose(key, tried);
      if (r < 0) break;
      tried.push_back(r);
      if (attempt > 0) retries.fetch_add(1);
      replicas.on_start(r);
      httplib::Client cli = client(r);
      httplib::Result up = cli.Post(path, headers, payload, "application/json");
      const bool ok = up && up->status < 500;
      replicas.on_finish(r, ok);
      if (!ok && attempt + 1 < config.max_attempts) {
        LOG_WARN("route: %s failed (%s); retrying elsewhere", replicas.url(r).c_str(),
                 up ? strprintf("HTTP %d", up->status).c_str() : httplib::to_string(up.error()).c_str());
        continue;
      }
      if (!up) break;
      res.status = up->status;
      res.set_content(up->body, up->get_header_value("Content-Type").empty() ? "application/json"
                                                                             : up->get_header_value("Content-Type"));
      if (up->has_header("Retry-After")) res.set_header("Retry-After", up->get_header_value("Retry-After"));
      observe(t.seconds());
      if (up->status >= 500) failed.fetch_add(1);
      return;
    }
    failed.fetch_add(1);
    send_error(res, 503, "no replica could take the request", "no_replica_available");
  }

  // Streams one request through; retries elsewhere while nothing was sent yet.
  void forward_stream(const char* path, const std::string& payload, const httplib::Headers& headers,
                      const RouteKey& key, httplib::DataSink& sink) {
    std::vector<int> tried;
    bool sent = false;
    for (int attempt = 0; attempt < config.max_attempts && !sent; ++attempt) {
      const int r = choose(key, tried);
      if (r < 0) break;
      tried.push_back(r);
      if (attempt > 0) retries.fetch_add(1);
      replicas.on_start(r);
      httplib::Client cli = client(r);
      httplib::Request up;
      up.method = "POST";
      up.path = path;
      up.headers = headers;
      up.headers.emplace("Content-Type", "application/json");
      up.body = payload;
      int status = 0;
      bool client_gone = false;
      std::string error_body;
      up.response_handler = [&](const httplib::Response& resp) {
        status = resp.status;
        return true;
      };
      up.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
        if (status >= 500) {  // keep it: retried, or relayed if no attempt is left
          error_body.append(data, n);
          return true;
        }
        if (!sink.is_writable() || !sink.write(data, n)) {
          client_gone = true;  // closing the upstream connection cancels the request there
          return false;
        }
        sent = true;
        return true;
      };
      httplib::Result result = cli.send(up);
      const bool ok = (result || client_gone) && status > 0 && status < 500;
      replicas.on_finish(r, ok);
      if (client_gone) return;
      if (ok || sent) return;
      if (attempt + 1 < config.max_attempts) continue;
      if (!error_body.empty()) {
        const std::string event = "data: " + error_body + "\n\n";
        sink.write(event.data(), event.size());
        failed.fetch_add(1);
        return;
      }
    }
    if (sent) return;
    failed.fetch_add(1);
    const std::string event =
        "data: " + error_json("no replica could take the request", "server_error", "no_replica_available").dump() +
        "\n\ndata: [DONE]\n\n";
    sink.write(event.data(), event.size());
  }

  std::string metrics_text() {
    std::string out;
    auto counter = [&](const char* name, const char* help, int64_t v) {
      out += strprintf("# HELP %s %s\n# TYPE %s counter\n%s %lld\n", name, help, name, name, static_cast<long long>(v));
    };
    counter("distllm_router_requests_total", "Requests the router received on /v1/*completions.", requests.load());
    counter("distllm_router_retries_total", "Attempts on another replica after a failure.", retries.load());
    counter("distllm_router_failures_total", "Requests that failed on every replica tried.", failed.load());
    counter("distllm_router_rejected_total", "Requests refused before routing (bad JSON).", rejected.load());
    out += "# HELP distllm_router_request_seconds End-to-end latency through the router.\n"
           "# TYPE distllm_router_request_seconds histogram\n";
    int64_t cum = 0;
    for (size_t b = 0; b < kNumBuckets; ++b) {
      cum += latency_buckets[b].load();
      out += strprintf("distllm_router_request_seconds_bucket{le=\"%g\"} %lld\n", kBuckets[b], static_cast<long long>(cum));
    }
    cum += latency_buckets[kNumBuckets].load();
    out += strprintf("distllm_router_request_seconds_bucket{le=\"+Inf\"} %lld\n", static_cast<long long>(cum));
    out += strprintf("distllm_router_request_seconds_sum %.6f\ndistllm_router_request_seconds_count %lld\n",
                     latency_sum.load(), static_cast<long long>(latency_count.load()));
    out += "# TYPE distllm_router_replica_ready gauge\n# TYPE distllm_router_replica_outstanding gauge\n"
           "# TYPE distllm_router_replica_requests_total counter\n# TYPE distllm_router_replica_failures_total counter\n"
           "# TYPE distllm_router_replica_breaker gauge\n";
    std::vector<ReplicaStatus> all = replicas.status();
    if (prefill) {
      for (ReplicaStatus s : prefill->replicas().status()) {
        s.url += " (prefill)";
        all.push_back(std::move(s));
      }
    }
    for (const ReplicaStatus& s : all) {
      const char* u = s.url.c_str();
      out += strprintf("distllm_router_replica_ready{replica=\"%s\"} %d\n", u, s.ready ? 1 : 0);
      out += strprintf("distllm_router_replica_outstanding{replica=\"%s\"} %lld\n", u, static_cast<long long>(s.outstanding));
      out += strprintf("distllm_router_replica_requests_total{replica=\"%s\"} %lld\n", u, static_cast<long long>(s.requests));
      out += strprintf("distllm_router_replica_failures_total{replica=\"%s\"} %lld\n", u, static_cast<long long>(s.failures));
      for (BreakerState st : {BreakerState::kClosed, BreakerState::kOpen, BreakerState::kHalfOpen})
        out += strprintf("distllm_router_replica_breaker{replica=\"%s\",state=\"%s\"} %d\n", u, breaker_name(st),
                         s.breaker == st ? 1 : 0);
    }
    return out;
  }
};

Router::Router(RouterConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {}
Router::~Router() { stop(); }

int Router::bind() {
  const RouterConfig& c = impl_->config;
  int port = c.port;
  if (port == 0) {
    port = impl_->server.bind_to_any_port(c.host.c_str());
    DL_CHECK(port > 0, "router: cannot bind %s", c.host.c_str());
  } else {
    DL_CHECK(impl_->server.bind_to_port(c.host.c_str(), port), "router: cannot bind %s:%d", c.host.c_str(), port);
  }
  return port;
}

void Router::serve() {
  impl_->replicas.start();
  if (impl_->prefill) impl_->prefill->start();
  impl_->server.listen_after_bind();
}

void Router::stop() {
  if (!impl_) return;
  impl_->server.stop();
  impl_->replicas.stop();
  if (impl_->prefill) impl_->prefill->stop();
}

ReplicaSet& Router::replicas() { return impl_->replicas; }

}  // namespace distllm::router
