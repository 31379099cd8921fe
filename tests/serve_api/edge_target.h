// The HTTP edge under test, over real sockets: the server itself, or the router in
// front of it with the same limits and API key (both serve through http/edge.h,
// so the framing and slow-client tests run against each).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <ostream>
#include <string>
#include <thread>

#include "distllm/router/proxy.h"
#include "serve_api/api_fixture.h"

namespace distllm::serve::api::test_support {

enum class EdgeKind { kServer, kRouter };

// How gtest (and so CTest's test names: Edge/Framing.X/server) shows the parameter.
inline void PrintTo(EdgeKind kind, std::ostream* os) { *os << (kind == EdgeKind::kServer ? "server" : "router"); }

struct EdgeTarget {
  Server server;
  std::unique_ptr<router::Router> router;
  std::thread router_thread;
  int port = 0;  // where clients connect
  OpenAIClient client;

  // `sc` configures the edge under test: the server's, or the router's (the
  // server behind a router then keeps the defaults).
  EdgeTarget(EdgeKind kind, const ApiServerConfig& sc = Server::config())
      : server(default_engine(), kind == EdgeKind::kServer ? sc : Server::config()),
        port(kind == EdgeKind::kServer ? server.port : start_router(sc)),
        client("http://127.0.0.1:" + std::to_string(port), sc.api_key, 30) {}
  ~EdgeTarget() {
    if (router) {
      router->stop();
      router_thread.join();
    }
  }

  int open_connections() const { return router ? router->open_connections() : server.server.open_connections(); }

 private:
  int start_router(const ApiServerConfig& sc) {
    router::RouterConfig c;
    c.port = 0;
    c.replicas = {"http://127.0.0.1:" + std::to_string(server.port)};
    c.api_key = sc.api_key;
    c.http.max_body_bytes = sc.max_body_bytes;
    c.http.header_timeout_s = sc.header_timeout_s;
    c.http.body_timeout_s = sc.body_timeout_s;
    c.http.keep_alive_timeout_s = sc.keep_alive_timeout_s;
    c.http.max_connections = sc.max_connections;
    c.http.max_connections_per_ip = sc.max_connections_per_ip;
    router = std::make_unique<router::Router>(c);
    const int p = router->bind();
    router_thread = std::thread([this] { router->serve(); });
    // serve() runs one round of health checks before it accepts: the first
    // request below waits for it.
    OpenAIClient probe("http://127.0.0.1:" + std::to_string(p), "", 5);
    for (int i = 0; i < 100 && probe.get("/health").status != 200; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return p;
  }
};

}  // namespace distllm::serve::api::test_support
