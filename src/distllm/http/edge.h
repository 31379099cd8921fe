// The one HTTP edge of `distllm serve` and `distllm route`: the front (front.h:
// one epoll thread, read deadlines, connection caps, framing checks) feeding
// cpp-httplib, which only routes requests to handlers and writes responses; the
// API key checked on every head before its body is read (api_key.h); and OpenAI
// error objects (openai_error.h) for every error the edge answers itself: framing
// refusals, 401, 404 for an unknown route, 413, and 500 for a handler that threw.
//
//   HttpEdge edge(limits, api_key);
//   edge.routes().Post("/v1/completions", handler);   // cpp-httplib handlers
//   int port = edge.bind(host, port);
//   edge.run();                                        // until stop()
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <httplib.h>

#include "distllm/http/api_key.h"
#include "distllm/http/front.h"

namespace distllm::http {

class HttpEdge {
 public:
  HttpEdge(FrontLimits limits, std::string api_key);
  ~HttpEdge();
  HttpEdge(const HttpEdge&) = delete;
  HttpEdge& operator=(const HttpEdge&) = delete;

  // Where handlers are registered (Get, Post, set_pre_routing_handler...). Set no
  // error or exception handler: the edge's write OpenAI error objects.
  httplib::Server& routes();
  // Binds and listens; returns the port (0: any free one). Throws distllm::Error.
  int bind(const std::string& host, int port);
  // Serves until stop().
  void run();
  // Streams in progress end, nothing new is read, run() returns once the requests
  // being answered finish. Thread-safe.
  void stop();
  // Every connection closes after its current response; idle ones at once.
  void set_draining();

  int open_connections() const;
  // Requests being answered by workers now.
  int busy_requests() const;
  const ApiKeyCheck& api_key() const { return key_; }
  const FrontLimits& limits() const { return limits_; }

 private:
  class Processor;
  FrontLimits limits_;
  ApiKeyCheck key_;
  std::unique_ptr<Processor> routes_;
  std::unique_ptr<HttpFront> front_;
};

// Answers `res` with an OpenAI error object.
void send_openai_error(httplib::Response& res, int status, std::string_view message, std::string_view param = "",
                       std::string_view code = "");

// Every connection holds a descriptor: raises the soft open-file limit as far as
// the hard one allows and returns the connection cap that fits under it (with room
// for model files, logs and the process's own descriptors), warning when that is
// less than `wanted`, so accept never runs out. `flag` names the option in the warning.
int fit_connections_to_fd_limit(int wanted, const char* flag);

}  // namespace distllm::http
