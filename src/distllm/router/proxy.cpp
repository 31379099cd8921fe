#include "distllm/router/proxy.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <map>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "distllm/base/error.h"
#include "distllm/base/log.h"
#include "distllm/base/strings.h"
#include "distllm/base/timer.h"
#include "distllm/http/edge.h"
#include "distllm/http/openai_error.h"
#include "distllm/router/metrics.h"
#include "distllm/router/prefill_pool.h"
#include "distllm/router/stream_pipe.h"

namespace distllm::router {
namespace {

using Json = nlohmann::ordered_json;

using http::send_openai_error;

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

}  // namespace

struct Router::Impl {
  RouterConfig config;
  ReplicaSet replicas;
  std::unique_ptr<RoutingPolicy> policy;
  ModelRoutes routes;
  std::unique_ptr<PrefillPool> prefill;  // set with --prefill
  http::HttpEdge edge;
  httplib::Server& server;  // the edge's routes
  RouterMetrics metrics;

  explicit Impl(RouterConfig c)
      : config(std::move(c)),
        replicas(config.replicas, config.replica),
        policy(make_policy(config.policy, static_cast<int>(config.replicas.size()))),
        routes(config.splits),
        edge(config.http, config.api_key),
        server(edge.routes()) {
    DL_CHECK(config.max_attempts >= 1, "--max-attempts must be at least 1");
    if (!config.prefill_replicas.empty()) prefill = std::make_unique<PrefillPool>(config.prefill_replicas, config.replica);
    // The API key is checked by the edge on every head, before its body is read.
    server.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      const size_t n = replicas.available().size();
      res.status = n > 0 ? 200 : 503;
      res.set_content(Json{{"status", n > 0 ? "ok" : "no replica available"}, {"available_replicas", n}}.dump(),
                      "application/json");
    });
    server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics.render(all_replica_status()), "text/plain; version=0.0.4; charset=utf-8");
    });
    server.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      Json data = replicas.models();
      for (auto& alias : routes.alias_entries()) data.push_back(std::move(alias));
      res.set_content(Json{{"object", "list"}, {"data", data}}.dump(), "application/json");
    });
    server.Get("/admin/replicas", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(Json{{"replicas", replicas_json()}}.dump(), "application/json");
    });
    for (const bool drain : {true, false}) {
      server.Post(drain ? "/admin/replicas/drain" : "/admin/replicas/undrain",
                  [this, drain](const httplib::Request& req, httplib::Response& res) { set_draining(req, res, drain); });
    }
    for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
      server.Post(path, [this, path](const httplib::Request& req, httplib::Response& res) { proxy(path, req, res); });
    }
  }

  void proxy(const char* path, const httplib::Request& req, httplib::Response& res) {
    metrics.requests.fetch_add(1);
    Json body = Json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object()) {
      metrics.rejected.fetch_add(1);
      send_openai_error(res, 400, "the request body must be a JSON object", "", "invalid_json");
      return;
    }
    RouteKey key;
    key.prompt = prompt_text(body);
    key.session = req.get_header_value("X-Session-Id");
    if (key.session.empty()) {
      if (auto u = body.find("user"); u != body.end() && u->is_string()) key.session = u->get<std::string>();
    }
    std::string model;
    bool rewritten = false;
    if (auto m = body.find("model"); m != body.end()) {
      if (!m->is_string()) {
        metrics.rejected.fetch_add(1);
        send_openai_error(res, 400, "'model' must be a string", "model", "invalid_model");
        return;
      }
      model = routes.resolve(m->get<std::string>(), key.session);
      if (model != m->get<std::string>()) {
        *m = model;
        rewritten = true;
      }
    }
    if (!model.empty() && !replicas.serves(model)) {
      metrics.rejected.fetch_add(1);
      send_openai_error(res, 404, "the model '" + model + "' does not exist on any ready replica", "model",
                        "model_not_found");
      return;
    }
    metrics.count_model(model);
    const std::string payload = rewritten ? body.dump() : req.body;
    const bool stream = body.value("stream", false);
    std::string request_id = req.get_header_value("X-Request-Id");
    if (request_id.empty()) request_id = new_request_id();
    httplib::Headers headers = {{"X-Request-Id", request_id}};
    res.set_header("X-Request-Id", request_id);
    // Held until the request ends (the pump thread holds it for a stream).
    std::shared_ptr<PrefillPool::Lease> prefill_lease = name_prefill_replica(headers);
    Target target{path, payload, headers, key, model};
    if (!stream) {
      forward(target, res);
      return;
    }
    // The pump reads upstream on its own thread; this one waits for the status, so
    // that a replica's 4xx reaches the client as a 4xx, not inside a 200 stream.
    auto started = std::make_shared<Timer>();
    auto pipe = std::make_shared<StreamPipe>();
    auto pump = std::make_shared<std::thread>([this, pipe, target, prefill_lease] {
      forward_stream(target, *pipe);
      pipe->finish();
    });
    const int status = pipe->wait_status();
    if (status < 200 || status >= 300) {
      std::string body_text, chunk;
      while (pipe->pop(chunk)) body_text += chunk;
      pump->join();
      res.status = status;
      res.set_content(body_text, pipe->content_type().empty() ? "application/json" : pipe->content_type());
      metrics.observe_latency(started->seconds());
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [pipe](size_t, httplib::DataSink& sink) {
          std::string chunk;
          while (pipe->pop(chunk)) {
            if (!sink.is_writable() || !sink.write(chunk.data(), chunk.size())) {
              pipe->cancel();  // the client left: the pump closes the upstream connection
              return false;
            }
          }
          sink.done();
          return true;
        },
        [this, pipe, pump, started](bool) {
          pipe->cancel();  // no-op after a complete stream; stops the pump otherwise
          pump->join();
          metrics.observe_latency(started->seconds());
        });
  }

  // One request as the replicas see it.
  struct Target {
    const char* path;
    std::string payload;
    httplib::Headers headers;
    RouteKey key;
    std::string model;  // after the split; empty: any replica
  };

  Json replicas_json() {
    Json out = Json::array();
    for (const ReplicaStatus& s : replicas.status()) {
      Json models = Json::array();
      for (const auto& m : s.models)
        if (m.is_object() && m.contains("id")) models.push_back(m["id"]);
      out.push_back({{"url", s.url}, {"ready", s.ready}, {"draining", s.draining}, {"breaker", breaker_name(s.breaker)},
                     {"outstanding", s.outstanding}, {"requests", s.requests}, {"failures", s.failures},
                     {"queued", s.queued}, {"kv_cache_usage", s.kv_usage < 0 ? Json(nullptr) : Json(s.kv_usage)},
                     {"models", models}});
    }
    return out;
  }

  void set_draining(const httplib::Request& req, httplib::Response& res, bool drain) {
    Json body = Json::parse(req.body, nullptr, false);
    if (!body.is_object() || !body.contains("replica") || !body["replica"].is_string()) {
      send_openai_error(res, 400, "the body must be {\"replica\": \"http://host:port\"}", "replica", "invalid_request");
      return;
    }
    const std::string url = body["replica"].get<std::string>();
    const int i = replicas.find(url);
    if (i < 0) {
      send_openai_error(res, 404, "no replica '" + url + "' behind this router", "replica", "replica_not_found");
      return;
    }
    replicas.set_draining(i, drain);
    LOG_INFO("route: %s %s", drain ? "draining" : "undrained", replicas.url(i).c_str());
    res.set_content(Json{{"replicas", replicas_json()}}.dump(), "application/json");
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
  int choose(const Target& t, const std::vector<int>& tried) {
    std::vector<ReplicaLoad> a = replicas.available(tried, t.model);
    if (a.empty()) return -1;
    return policy->pick(t.key, a);
  }

  httplib::Client client(int replica) {
    httplib::Client cli(replicas.url(replica));
    cli.set_tcp_nodelay(true);
    cli.set_connection_timeout(std::chrono::seconds(5));
    const auto t = std::chrono::duration<double>(config.upstream_timeout_s);
    cli.set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(t));
    cli.set_write_timeout(std::chrono::duration_cast<std::chrono::microseconds>(t));
    return cli;
  }

  void forward(const Target& t, httplib::Response& res) {
    Timer timer;
    std::vector<int> tried;
    for (int attempt = 0; attempt < config.max_attempts; ++attempt) {
      const int r = choose(t, tried);
      if (r < 0) break;
      tried.push_back(r);
      if (attempt > 0) metrics.retries.fetch_add(1);
      replicas.on_start(r);
      httplib::Client cli = client(r);
      httplib::Result up = cli.Post(t.path, t.headers, t.payload, "application/json");
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
      metrics.observe_latency(timer.seconds());
      if (up->status >= 500) metrics.failed.fetch_add(1);
      return;
    }
    metrics.failed.fetch_add(1);
    send_openai_error(res, 503, "no replica could take the request", "", "no_replica_available");
  }

  // Streams one request into `pipe`; retries elsewhere while nothing was committed:
  // a connect failure or a 5xx head. A 2xx or 4xx head is committed at once.
  void forward_stream(const Target& t, StreamPipe& pipe) {
    std::vector<int> tried;
    for (int attempt = 0; attempt < config.max_attempts; ++attempt) {
      const int r = choose(t, tried);
      if (r < 0) break;
      tried.push_back(r);
      if (attempt > 0) metrics.retries.fetch_add(1);
      replicas.on_start(r);
      httplib::Client cli = client(r);
      httplib::Request up;
      up.method = "POST";
      up.path = t.path;
      up.headers = t.headers;
      up.headers.emplace("Content-Type", "application/json");
      up.body = t.payload;
      int status = 0;
      size_t pushed = 0;
      bool committed = false, cancelled = false;
      std::string error_body, error_type;
      up.response_handler = [&](const httplib::Response& resp) {
        status = resp.status;
        if (status < 500) {
          pipe.set_status(status, resp.get_header_value("Content-Type"));
          committed = true;
        } else {
          error_type = resp.get_header_value("Content-Type");
        }
        return true;
      };
      up.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
        if (!committed) {  // a 5xx: kept, then retried or relayed
          error_body.append(data, n);
          return true;
        }
        if (!pipe.push(data, n)) {
          cancelled = true;  // closing the upstream connection cancels the request there
          return false;
        }
        pushed += n;
        return true;
      };
      httplib::Result result = cli.send(up);
      const bool ok = committed && (result || cancelled);
      replicas.on_finish(r, ok);
      if (committed && !ok && pushed == 0 && attempt + 1 < config.max_attempts) {
        LOG_WARN("route: %s broke off before the first byte; retrying elsewhere", replicas.url(r).c_str());
        continue;  // the client has seen nothing yet: another replica may answer
      }
      if (committed) {
        if (!result && !cancelled) LOG_WARN("route: %s broke off a stream (%s)", replicas.url(r).c_str(),
                                            httplib::to_string(result.error()).c_str());
        return;
      }
      if (attempt + 1 < config.max_attempts) continue;
      if (status >= 500) {
        metrics.failed.fetch_add(1);
        pipe.set_status(status, error_type);
        pipe.push(error_body.data(), error_body.size());
        return;
      }
    }
    metrics.failed.fetch_add(1);
    const std::string body = http::openai_error_text(503, "no replica could take the request", "", "no_replica_available");
    pipe.set_status(503, "application/json");
    pipe.push(body.data(), body.size());
  }

  // Every replica's state for /metrics: decode (or plain) replicas, then prefill ones.
  std::vector<ReplicaStatus> all_replica_status() {
    std::vector<ReplicaStatus> all = replicas.status();
    if (prefill) {
      for (ReplicaStatus s : prefill->replicas().status()) {
        s.url += " (prefill)";
        all.push_back(std::move(s));
      }
    }
    return all;
  }
};

Router::Router(RouterConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {}
Router::~Router() { stop(); }

int Router::bind() { return impl_->edge.bind(impl_->config.host, impl_->config.port); }

void Router::serve() {
  impl_->replicas.start();
  if (impl_->prefill) impl_->prefill->start();
  impl_->edge.run();
}

void Router::stop() {
  if (!impl_) return;
  impl_->edge.stop();
  impl_->replicas.stop();
  if (impl_->prefill) impl_->prefill->stop();
}

ReplicaSet& Router::replicas() { return impl_->replicas; }

int Router::open_connections() const { return impl_->edge.open_connections(); }

}  // namespace distllm::router
