// `distllm route`: an OpenAI-compatible proxy in front of N serving replicas (ours,
// or any OpenAI-compatible server: llama.cpp's, vLLM).
//
// Clients reach it through the HTTP edge the server uses (http/edge.h): the same
// read deadlines, connection caps, framing checks and constant-time API key.
//
// POST /v1/completions and /v1/chat/completions go to the replica the policy picks
// among those that may take traffic (replica_set.h); upstream.h sends them: a
// connect failure, a timeout or a 5xx before any byte reached the client is retried
// on another replica (up to max_attempts in all); a stream is passed through event
// by event, a client that disconnects closes the upstream connection (which
// cancels the request on the replica), and a replica that breaks a stream off
// leaves the client an error event and [DONE]. GET /v1/models lists the union of
// the ready replicas' models and the split aliases; /health is 200 while any
// replica can take traffic; /metrics has the router's own counters and
// per-replica state. An API key on the router guards /v1/* and /admin/*
// independently of the replicas'.
//
// A request goes only to replicas that serve its `model` (after an alias's weighted
// split picked the target, model_routes.h). A model a replica served before while
// none that serves it is up gets 503 with Retry-After (a retry may well succeed);
// only a model no replica ever listed gets 404.
//
// Admin: GET /admin/replicas (state of each), POST /admin/replicas/drain and
// /admin/replicas/undrain with {"replica": URL}. A draining replica gets no new
// requests; those in flight finish (its `outstanding` in /admin/replicas falls to
// 0, then it can be stopped).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "distllm/http/front.h"
#include "distllm/router/model_routes.h"
#include "distllm/router/replica_set.h"

namespace distllm::router {

struct RouterConfig {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port
  std::vector<std::string> replicas;
  // Prefill replicas (prefill/decode disaggregation, prefill_pool.h): when given,
  // `replicas` are decode replicas and each request names a prefill replica to them.
  std::vector<std::string> prefill_replicas;
  std::string policy = "least_outstanding";
  Splits splits;                       // weighted model aliases (model_routes.h)
  std::string api_key;                 // non-empty: /v1/* and /admin/* need "Authorization: Bearer <key>"
  int max_attempts = 3;                // replicas tried per request
  double upstream_timeout_s = 600;     // per forwarded request
  // The edge's limits (front.h): body size (larger bodies get 413 and are never
  // forwarded), deadlines, connection caps, and `workers`: requests answered at
  // once (a stream holds one for its whole length).
  http::FrontLimits http = {.workers = 64};
  ReplicaOptions replica;
};

class Router {
 public:
  explicit Router(RouterConfig config);
  ~Router();
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  // Binds the listening socket and returns its port. Throws distllm::Error.
  int bind();
  // Starts health checks and serves until stop().
  void serve();
  void stop();
  ReplicaSet& replicas();
  // Client connections open now (for tests and logs).
  int open_connections() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace distllm::router
