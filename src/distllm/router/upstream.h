// The replica side of the router: sends one client request to the replica the
// policy picks and brings back its answer.
//
// A connect failure, a timeout or a 5xx before any byte reached the client is
// retried on another replica (up to max_attempts replicas in all). Streams are
// relayed event by event (sse_relay.h); a replica that breaks a stream off once
// events went out (killed, crashed, connection lost, or a stream that ends without
// [DONE]) leaves the client an error event and [DONE], counted in
// distllm_router_streams_broken_total, and counts as a failure of that replica.
#pragma once

#include <string>
#include <vector>

#include <httplib.h>

#include "distllm/router/metrics.h"
#include "distllm/router/policy.h"
#include "distllm/router/replica_set.h"
#include "distllm/router/stream_pipe.h"

namespace distllm::router {

// One request as the replicas see it.
struct UpstreamRequest {
  const char* path = "";
  std::string payload;
  httplib::Headers headers;
  RouteKey key;
  std::string model;  // after the split; empty: any replica
};

struct UpstreamOptions {
  int max_attempts = 3;
  double timeout_s = 600;  // per attempt: connect, and each read or write
};

class Upstream {
 public:
  Upstream(ReplicaSet& replicas, RoutingPolicy& policy, RouterMetrics& metrics, UpstreamOptions options)
      : replicas_(replicas), policy_(policy), metrics_(metrics), options_(options) {}

  // The replica's whole response into `res`, or a 503 (with Retry-After) when no
  // replica could answer.
  void forward(const UpstreamRequest& req, httplib::Response& res);
  // The replica's status, then its body as it arrives, into `pipe` (the caller
  // finishes the pipe). See above for retries and broken streams.
  void forward_stream(const UpstreamRequest& req, StreamPipe& pipe);

 private:
  enum class Outcome {
    kFinished,   // relayed whole (or the client left): nothing more to do
    kRetryable,  // nothing reached the client: another replica may answer
    kBroken,     // the replica broke off a stream the client is reading
  };
  struct Attempt {
    Outcome outcome = Outcome::kRetryable;
    bool replica_ok = false;  // for the replica's breaker
    std::string why;          // what went wrong, for logs and the error event
    int status = 0;           // a 5xx status and body kept to relay if no replica answers
    std::string body, content_type;
    std::string ending;       // kBroken: what ends the client's stream
  };

  // Picks a replica no earlier attempt used; -1 when none is left.
  int choose(const UpstreamRequest& req, const std::vector<int>& tried);
  httplib::Client client(int replica) const;
  // `stream_open`: the client already has a 2xx event-stream head (set here once it does).
  Attempt stream_once(int replica, const UpstreamRequest& req, StreamPipe& pipe, bool& stream_open);

  ReplicaSet& replicas_;
  RoutingPolicy& policy_;
  RouterMetrics& metrics_;
  UpstreamOptions options_;
};

}  // namespace distllm::router
