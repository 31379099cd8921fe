#include "distllm/router/proxy.h"

#include <httplib.h>

#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "distllm/base/error.h"
#include "distllm/base/log.h"
#include "distllm/base/strings.h"
#include "distllm/base/timer.h"
#include "distllm/http/edge.h"
#include "distllm/http/peer_socket.h"
#include "distllm/router/metrics.h"
#include "distllm/router/prefill_pool.h"
#include "distllm/router/stream_pipe.h"
#include "distllm/router/upstream.h"

namespace distllm::router {
namespace {

using Json = nlohmann::ordered_json;

using http::send_openai_error;

constexpr double kClientPollSeconds = 0.05;  // how often a waiting stream looks at its client

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
  RouterMetrics metrics;
  Upstream upstream;
  http::HttpEdge edge;
  httplib::Server& server;  // the edge's routes

  explicit Impl(RouterConfig c)
      : config(std::move(c)),
        replicas(config.replicas, config.replica),
        policy(make_policy(config.policy, static_cast<int>(config.replicas.size()))),
        routes(config.splits),
        upstream(replicas, *policy, metrics, UpstreamOptions{config.max_attempts, config.upstream_timeout_s}),
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
    } else if (!default_model(body, model, res)) {
      metrics.rejected.fetch_add(1);
      return;
    } else {
      rewritten = !model.empty();
    }
    if (!model.empty() && !model_available(model, res)) return;
    metrics.count_model(model);
    std::string request_id = req.get_header_value("X-Request-Id");
    if (request_id.empty()) request_id = new_request_id();
    UpstreamRequest up{path, rewritten ? body.dump() : req.body, {{"X-Request-Id", request_id}}, key, model};
    res.set_header("X-Request-Id", request_id);
    // Held until the request ends (the pump thread holds it for a stream).
    std::shared_ptr<PrefillPool::Lease> prefill_lease = name_prefill_replica(up.headers);
    // A "stream" that is not a boolean goes as a plain request: the replica refuses it by name.
    const auto want_stream = body.find("stream");
    if (want_stream != body.end() && want_stream->is_boolean() && want_stream->get<bool>())
      stream(std::move(up), std::move(prefill_lease), res);
    else upstream.forward(up, res);
  }

  // A request without `model` goes to the one model the ready replicas serve (as a
  // single server takes it), written into the body so every replica agrees; with
  // several models it is refused naming them, and with no replica up it is left
  // for the replicas' own answer (503 when none is up).
  bool default_model(Json& body, std::string& model, httplib::Response& res) {
    std::vector<std::string> ids;
    for (const auto& m : replicas.models())
      if (m.contains("id") && m["id"].is_string()) ids.push_back(m["id"].get<std::string>());
    if (ids.size() > 1) {
      std::string names;
      for (const std::string& id : ids) names += (names.empty() ? "" : ", ") + id;
      send_openai_error(res, 400, "'model' is required: this router serves " + names, "model", "model_required");
      return false;
    }
    if (ids.size() == 1) {
      model = ids[0];
      body["model"] = model;
    }
    return true;
  }

  // A model no replica ever served is a 404; one whose replicas are all down (or
  // draining) is a 503 the client may retry.
  bool model_available(const std::string& model, httplib::Response& res) {
    switch (replicas.model_state(model)) {
      case ModelState::kServed: return true;
      case ModelState::kDown:
        metrics.unavailable.fetch_add(1);
        send_openai_error(res, 503, "no replica that serves the model '" + model + "' is up; retry later", "model",
                          "no_replica_available");
        res.set_header("Retry-After", "1");
        return false;
      case ModelState::kUnknown: break;
    }
    metrics.rejected.fetch_add(1);
    send_openai_error(res, 404, "the model '" + model + "' does not exist on any replica", "model", "model_not_found");
    return false;
  }

  // The pump reads upstream on its own thread; this one waits for the status, so
  // that a replica's 4xx reaches the client as a 4xx, not inside a 200 stream.
  void stream(UpstreamRequest up, std::shared_ptr<PrefillPool::Lease> prefill_lease, httplib::Response& res) {
    auto started = std::make_shared<Timer>();
    auto pipe = std::make_shared<StreamPipe>();
    auto pump = std::make_shared<std::thread>([this, pipe, up = std::move(up), prefill_lease] {
      upstream.forward_stream(up, *pipe);
      pipe->finish();
    });
    const int status = pipe->wait_status();
    if (status < 200 || status >= 300) {
      std::string body_text, chunk;
      while (pipe->pop(chunk)) body_text += chunk;
      pump->join();
      res.status = status;
      res.set_content(body_text, pipe->content_type().empty() ? "application/json" : pipe->content_type());
      if (status == 503) res.set_header("Retry-After", "1");
      metrics.observe_latency(started->seconds());
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [pipe](size_t, httplib::DataSink& sink) {
          const int client = http::HttpFront::current_socket();
          std::string chunk;
          while (true) {
            switch (pipe->pop_for(chunk, kClientPollSeconds)) {
              case StreamPipe::Pop::kChunk:
                if (sink.write(chunk.data(), chunk.size())) continue;
                break;  // the client left
              case StreamPipe::Pop::kEnd:
                sink.done();
                return true;
              case StreamPipe::Pop::kTimeout:
                if (!http::peer_closed(client)) continue;  // a long prefill writes nothing for a while
                break;
            }
            pipe->cancel();  // the pump closes the upstream connection: the replica cancels the request
            return false;
          }
        },
        [this, pipe, pump, started](bool) {
          pipe->cancel();  // no-op after a complete stream; stops the pump otherwise
          pump->join();
          metrics.observe_latency(started->seconds());
        });
  }

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
