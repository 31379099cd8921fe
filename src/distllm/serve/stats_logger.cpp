#include "distllm/serve/stats_logger.h"

#include <chrono>

#include "distllm/base/log.h"
#include "distllm/base/strings.h"
#include "distllm/base/timer.h"

namespace distllm::serve {

std::string throughput_line(const MetricsSnapshot& before, const MetricsSnapshot& now, double seconds) {
  const int64_t prompt = now.prompt_tokens - before.prompt_tokens;
  const int64_t generated = now.generation_tokens - before.generation_tokens;
  if (prompt == 0 && generated == 0 && now.running == 0 && now.waiting == 0) return "";
  const int64_t queried = now.prefix_query_tokens - before.prefix_query_tokens;
  const int64_t hit = now.prefix_hit_tokens - before.prefix_hit_tokens;
  std::string line = strprintf(
      "serve: prompt %.1f tokens/s, generation %.1f tokens/s, running %lld, waiting %lld, KV cache %.1f%% used",
      static_cast<double>(prompt) / seconds, static_cast<double>(generated) / seconds, (long long)now.running,
      (long long)now.waiting, 100.0 * now.kv_usage);
  if (queried > 0) line += strprintf(", prefix cache hit rate %.1f%%", 100.0 * static_cast<double>(hit) / queried);
  const int64_t preempted = now.preemptions - before.preemptions;
  if (preempted > 0) line += strprintf(", %lld preemptions", (long long)preempted);
  return line;
}

StatsLogger::StatsLogger(const ServeMetrics& metrics, double interval_s) : metrics_(metrics), interval_s_(interval_s) {
  thread_ = std::thread([this] { run(); });
}

StatsLogger::~StatsLogger() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StatsLogger::run() {
  MetricsSnapshot before = metrics_.snapshot();
  double at = now_seconds();
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, std::chrono::duration<double>(interval_s_), [&] { return stop_; })) {
    const MetricsSnapshot now = metrics_.snapshot();
    const double t = now_seconds();
    const std::string line = throughput_line(before, now, t - at);
    if (!line.empty()) LOG_INFO("%s", line.c_str());
    before = now;
    at = t;
  }
}

}  // namespace distllm::serve
