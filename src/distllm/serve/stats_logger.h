// The server's periodic throughput line, as vLLM and llama.cpp log one: every
// interval in which anything happened, the prompt and generation tokens per second
// since the last line, the requests running and waiting, the KV cache in use and the
// prefix cache's hit rate. Quiet while the server is idle.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "distllm/serve/metrics.h"

namespace distllm::serve {

// The line for what changed between two snapshots `seconds` apart; "" when nothing did.
std::string throughput_line(const MetricsSnapshot& before, const MetricsSnapshot& now, double seconds);

class StatsLogger {
 public:
  // Logs every `interval_s` seconds (> 0) until destroyed.
  StatsLogger(const ServeMetrics& metrics, double interval_s);
  ~StatsLogger();
  StatsLogger(const StatsLogger&) = delete;
  StatsLogger& operator=(const StatsLogger&) = delete;

 private:
  const ServeMetrics& metrics_;
  double interval_s_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
  void run();
};

}  // namespace distllm::serve
