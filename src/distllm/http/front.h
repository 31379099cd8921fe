// The HTTP front of `distllm serve` and `distllm route`: accepts connections and
// reads requests on one event-driven thread (epoll), and hands complete requests
// to a pool of workers.
//
// Why not cpp-httplib's own loop: it gives every connection a pool thread from
// accept on, so a few hundred clients that trickle a request byte by byte (or just
// stay idle) hold every thread and nobody else is served; and it reads chunked
// bodies without a limit (see framing.h). Here a connection costs a thread only
// while a complete, validated request is being answered; heads and bodies are read
// with deadlines (request_reader.h turns the bytes into requests); connections are
// capped in total and per client address. cpp-httplib still parses, routes and
// writes every response (the worker runs httplib::Server::process_request over the
// canonical request); edge.h puts the two together.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <httplib.h>

#include "distllm/http/framing.h"
#include "distllm/http/request_reader.h"

namespace distllm::http {

struct FrontLimits {
  size_t max_body_bytes = 2u << 20;
  size_t max_head_bytes = 16u << 10;
  double header_timeout_s = 10;       // from a request's first byte (or the accept) to its full head
  double body_timeout_s = 30;         // from the head to the full body
  double keep_alive_timeout_s = 5;    // an idle connection between requests
  double write_timeout_s = 10;        // a response write that makes no progress
  int max_connections = 4096;         // open connections at most (more are refused with 503)
  int max_connections_per_ip = 512;   // from one client address
  int max_requests_per_connection = 1000;
  int workers = 32;                   // requests answered at once
};

class HttpFront {
 public:
  // Answers one canonical request read from `strm` (writes go to the client).
  // Returns false when the connection must close; sets `connection_closed` when
  // the request asked for that (cpp-httplib's process_request contract).
  using Processor = std::function<bool(httplib::Stream& strm, bool close_connection, bool& connection_closed)>;
  // Looks at a head before its body is read (request_reader.h). Used for the API key.
  using Screen = RequestReader::Screen;
  // The JSON body of an error the front answers itself.
  using ErrorBody = std::function<std::string(const FramingError& err)>;

  HttpFront(FrontLimits limits, Processor process, Screen screen, ErrorBody error_body);
  ~HttpFront();
  HttpFront(const HttpFront&) = delete;
  HttpFront& operator=(const HttpFront&) = delete;

  // Binds and listens (backlog 1024); returns the port (port 0: any free one).
  // Throws distllm::Error.
  int bind(const std::string& host, int port);
  // Runs the event loop until stop(); then waits for the workers.
  void run();
  // Thread-safe (not async-signal-safe).
  void stop();
  // From now on every connection closes after its current response, and idle ones
  // close at once. Thread-safe.
  void set_draining();

  // The socket of the connection whose request the calling worker is answering
  // (-1 outside a worker): handlers poll it to notice a client that went away.
  static int current_socket();

  int open_connections() const { return open_.load(); }
  int busy_requests() const { return busy_.load(); }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::atomic<int> open_{0};
  std::atomic<int> busy_{0};
};

}  // namespace distllm::http
