// SIGINT/SIGTERM for a serving process, as orchestrators expect: the first signal
// starts a graceful shutdown (ApiServer::shutdown_gracefully: readiness fails, new
// requests get 503, running ones get up to the drain timeout), a second one exits
// at once with status 128 + signal.
#pragma once

#include <atomic>
#include <thread>

#include "distllm/serve/api/http_server.h"

namespace distllm::serve::api {

class ShutdownOnSignals {
 public:
  // Installs the handlers (one instance per process at a time).
  ShutdownOnSignals(ApiServer& server, double drain_timeout_s);
  // Restores the default handlers; waits for a shutdown in progress.
  ~ShutdownOnSignals();
  ShutdownOnSignals(const ShutdownOnSignals&) = delete;
  ShutdownOnSignals& operator=(const ShutdownOnSignals&) = delete;

 private:
  void watch(ApiServer& server, double drain_timeout_s);

  int pipe_[2] = {-1, -1};
  std::thread watcher_;
};

}  // namespace distllm::serve::api
