// What the router's end-to-end tests share: serve_test_server replicas as child
// processes, the router in-process in front of them, request builders and a
// reader for the router's /metrics.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "distllm/client/openai_client.h"
#include "distllm/router/proxy.h"
#include "router/test_server_process.h"

namespace distllm::router::test_support {

using Json = nlohmann::ordered_json;
using client::HttpResult;
using client::OpenAIClient;

struct Replica : TestServerProcess {
  std::vector<std::string> extra_args;  // more serve_test_server flags

  // port 0: any free port.
  void start(int want_port = 0) {
    std::vector<std::string> flags = {"--port", std::to_string(want_port), "--step-delay-ms", "2"};
    flags.insert(flags.end(), extra_args.begin(), extra_args.end());
    TestServerProcess::start(flags);
  }
};

inline Json completion(int i, bool stream = false) {
  return Json{{"model", "test-model"}, {"prompt", "request " + std::to_string(i)}, {"max_tokens", 8},
              {"temperature", 0}, {"stream", stream}};
}

inline int64_t metric(const std::string& text, const std::string& line_prefix) {
  size_t p = text.find(line_prefix);
  if (p == std::string::npos) return -1;
  return std::stoll(text.substr(p + line_prefix.size()));
}

// Stops and joins load threads however the test leaves (an ASSERT returns early).
struct LoadThreads {
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  void join() {
    stop.store(true);
    for (auto& t : threads)
      if (t.joinable()) t.join();
  }
  ~LoadThreads() { join(); }
};

struct Fixture {
  std::vector<Replica> replicas;
  std::unique_ptr<Router> router;
  std::thread thread;
  int port = 0;

  // `replica_args[i]`: replica i's extra flags; three plain replicas by default.
  explicit Fixture(const std::string& policy, std::vector<std::vector<std::string>> replica_args = {{}, {}, {}},
                   Splits splits = {})
      : replicas(replica_args.size()) {
    RouterConfig c;
    c.port = 0;
    c.policy = policy;
    c.splits = std::move(splits);
    c.replica.health_interval_s = 0.2;
    c.replica.open_seconds = 0.5;
    c.replica.failure_threshold = 2;
    for (size_t i = 0; i < replicas.size(); ++i) {
      replicas[i].extra_args = replica_args[i];
      replicas[i].start();
      c.replicas.push_back(replicas[i].url());
    }
    router = std::make_unique<Router>(c);
    port = router->bind();
    thread = std::thread([this] { router->serve(); });
    OpenAIClient probe(url(), "", 5);
    for (int i = 0; i < 100 && probe.get("/health").status != 200; ++i) usleep(20000);
  }
  ~Fixture() {
    router->stop();
    thread.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
};

}  // namespace distllm::router::test_support
