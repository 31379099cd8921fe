#include "distllm/router/upstream.h"

#include <chrono>

#include "distllm/base/log.h"
#include "distllm/base/strings.h"
#include "distllm/base/timer.h"
#include "distllm/http/edge.h"
#include "distllm/http/openai_error.h"
#include "distllm/router/sse_relay.h"

namespace distllm::router {
namespace {

constexpr const char* kNoReplica = "no replica could take the request";
constexpr size_t kMaxErrorBody = 64u << 10;  // of a 5xx kept for relaying

bool is_event_stream(const std::string& content_type) { return content_type.rfind("text/event-stream", 0) == 0; }

std::string broken_message(const std::string& url, const std::string& why) {
  return "the replica serving this request (" + url + ") broke off the stream (" + why +
         "): the output is incomplete";
}

}  // namespace

int Upstream::choose(const UpstreamRequest& req, const std::vector<int>& tried) {
  std::vector<ReplicaLoad> a = replicas_.available(tried, req.model);
  if (a.empty()) return -1;
  return policy_.pick(req.key, a);
}

httplib::Client Upstream::client(int replica) const {
  httplib::Client cli(replicas_.url(replica));
  cli.set_tcp_nodelay(true);
  cli.set_connection_timeout(std::chrono::seconds(5));
  const auto t = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(options_.timeout_s));
  cli.set_read_timeout(t);
  cli.set_write_timeout(t);
  return cli;
}

void Upstream::forward(const UpstreamRequest& t, httplib::Response& res) {
  Timer timer;
  std::vector<int> tried;
  for (int attempt = 0; attempt < options_.max_attempts; ++attempt) {
    const int r = choose(t, tried);
    if (r < 0) break;
    tried.push_back(r);
    if (attempt > 0) metrics_.retries.fetch_add(1);
    replicas_.on_start(r);
    httplib::Client cli = client(r);
    httplib::Result up = cli.Post(t.path, t.headers, t.payload, "application/json");
    const bool ok = up && up->status < 500;
    replicas_.on_finish(r, ok);
    if (!ok && attempt + 1 < options_.max_attempts) {
      LOG_WARN("route: %s failed (%s); retrying elsewhere", replicas_.url(r).c_str(),
               up ? strprintf("HTTP %d", up->status).c_str() : httplib::to_string(up.error()).c_str());
      continue;
    }
    if (!up) break;
    res.status = up->status;
    const std::string type = up->get_header_value("Content-Type");
    res.set_content(up->body, type.empty() ? "application/json" : type);
    if (up->has_header("Retry-After")) res.set_header("Retry-After", up->get_header_value("Retry-After"));
    metrics_.observe_latency(timer.seconds());
    if (up->status >= 500) metrics_.failed.fetch_add(1);
    return;
  }
  metrics_.failed.fetch_add(1);
  http::send_openai_error(res, 503, kNoReplica, "", "no_replica_available");
  res.set_header("Retry-After", "1");
}

Upstream::Attempt Upstream::stream_once(int r, const UpstreamRequest& t, StreamPipe& pipe, bool& stream_open) {
  Attempt a;
  httplib::Client cli = client(r);
  httplib::Request up;
  up.method = "POST";
  up.path = t.path;
  up.headers = t.headers;
  up.headers.emplace("Content-Type", "application/json");
  up.body = t.payload;
  int status = 0;
  bool committed = false, sse = false, cancelled = false, refused = false;
  SseRelay relay;
  size_t pushed = 0;
  std::string out;
  up.response_handler = [&](const httplib::Response& resp) {
    status = resp.status;
    a.content_type = resp.get_header_value("Content-Type");
    if (status >= 500) return true;  // kept, then retried or relayed
    sse = status / 100 == 2 && is_event_stream(a.content_type);
    if (stream_open && !sse) {  // a retry must continue the event stream the client has
      refused = true;
      return false;
    }
    pipe.set_status(status, a.content_type);
    committed = true;
    stream_open = stream_open || sse;
    return true;
  };
  up.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (!committed) {
      if (a.body.size() < kMaxErrorBody) a.body.append(data, std::min(n, kMaxErrorBody - a.body.size()));
      return true;
    }
    out.clear();
    if (sse) relay.feed(std::string_view(data, n), out);
    else out.assign(data, n);
    if (out.empty()) return true;
    if (!pipe.push(out.data(), out.size())) {
      cancelled = true;  // closing the upstream connection cancels the request there
      return false;
    }
    pushed += out.size();
    return true;
  };
  httplib::Result result = cli.send(up);
  const std::string error = result ? "" : httplib::to_string(result.error());
  if (cancelled) {
    a.outcome = Outcome::kFinished;
    a.replica_ok = true;
    return a;
  }
  if (!committed) {  // a 5xx, no answer at all, or a head the open stream cannot take
    a.replica_ok = status > 0 && status < 500;  // a 429 is the replica working as designed
    a.status = refused ? 0 : status;
    a.why = refused ? strprintf("HTTP %d instead of an event stream", status)
            : status  ? strprintf("HTTP %d", status)
                      : error;
    return a;
  }
  if (sse ? relay.done() : static_cast<bool>(result)) {
    a.outcome = Outcome::kFinished;
    a.replica_ok = true;
    return a;
  }
  a.why = result ? "the stream ended without [DONE]" : error;
  if (pushed == 0 && !result) return a;  // nothing reached the client: retry elsewhere
  if (!sse) {
    LOG_WARN("route: %s broke off a response (%s)", replicas_.url(r).c_str(), a.why.c_str());
    a.outcome = Outcome::kFinished;  // not an event stream: nothing can be added to it
    return a;
  }
  a.outcome = Outcome::kBroken;
  a.ending = relay.broken_ending(502, broken_message(replicas_.url(r), a.why), "replica_stream_broken");
  return a;
}

void Upstream::forward_stream(const UpstreamRequest& t, StreamPipe& pipe) {
  std::vector<int> tried;
  bool stream_open = false;
  Attempt last;
  last.why = kNoReplica;
  for (int attempt = 0; attempt < options_.max_attempts; ++attempt) {
    const int r = choose(t, tried);
    if (r < 0) break;
    tried.push_back(r);
    if (attempt > 0) metrics_.retries.fetch_add(1);
    replicas_.on_start(r);
    Attempt a = stream_once(r, t, pipe, stream_open);
    replicas_.on_finish(r, a.replica_ok);
    if (a.outcome == Outcome::kFinished) return;
    if (a.outcome == Outcome::kBroken) {
      LOG_WARN("route: %s broke off a stream (%s); the client gets an error event", replicas_.url(r).c_str(),
               a.why.c_str());
      metrics_.streams_broken.fetch_add(1);
      pipe.push(a.ending.data(), a.ending.size());
      return;
    }
    LOG_WARN("route: %s failed before the first byte (%s)%s", replicas_.url(r).c_str(), a.why.c_str(),
             attempt + 1 < options_.max_attempts ? "; retrying elsewhere" : "");
    last = std::move(a);
  }
  metrics_.failed.fetch_add(1);
  if (stream_open) {  // a 2xx head went out, then no replica produced a byte
    metrics_.streams_broken.fetch_add(1);
    const std::string ending = http::openai_error_events(502, "no replica could finish the stream (" + last.why + ")",
                                                         "replica_stream_broken");
    pipe.push(ending.data(), ending.size());
    return;
  }
  if (last.status >= 500) {  // every replica tried answered 5xx: the last one's answer
    pipe.set_status(last.status, last.content_type);
    pipe.push(last.body.data(), last.body.size());
    return;
  }
  const std::string body = http::openai_error_text(503, kNoReplica, "", "no_replica_available");
  pipe.set_status(503, "application/json");
  pipe.push(body.data(), body.size());
}

}  // namespace distllm::router
