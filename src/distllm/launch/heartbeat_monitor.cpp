#include "distllm/launch/heartbeat_monitor.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "distllm/base/strings.h"

namespace distllm::launch {

HeartbeatMonitor::HeartbeatMonitor(std::string dir, int world, double hang_timeout_s)
    : dir_(std::move(dir)), hang_timeout_s_(hang_timeout_s), ranks_(static_cast<size_t>(world)) {}

void HeartbeatMonitor::reset(double now) {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
  std::filesystem::create_directories(dir_, ec);
  started_ = now;
  for (Rank& r : ranks_) r = Rank{};
}

std::string HeartbeatMonitor::poll(double now) {
  std::string worst;
  double worst_idle = -1;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& r = ranks_[i];
    std::string path = dir_ + strprintf("/rank_%zu", i);
    if (FILE* f = std::fopen(path.c_str(), "r")) {
      long long step = -1, start = -1;
      double when = 0;
      const int fields = std::fscanf(f, "%lld %lf %lld", &step, &when, &start);
      if (fields >= 2 && (!r.seen || step != r.step)) {
        if (!r.seen) r.first_step = fields == 3 ? start : step;
        r.seen = true;
        r.step = step;
        r.last_change = now;
        if (r.progressed_at < 0 && step > r.first_step) r.progressed_at = when;
      }
      std::fclose(f);
    }
    const double idle = now - (r.seen ? r.last_change : started_);
    if (idle > hang_timeout_s_ && idle > worst_idle) {
      worst_idle = idle;
      worst = r.seen ? strprintf("rank %zu made no progress for %.0f s (last step %lld)", i, idle, (long long)r.step)
                     : strprintf("rank %zu did not start within %.0f s (no heartbeat)", i, idle);
    }
  }
  return worst;
}

int64_t HeartbeatMonitor::min_step() const {
  int64_t m = INT64_MAX;
  for (const Rank& r : ranks_) {
    if (!r.seen) return -1;
    m = std::min(m, r.step);
  }
  return ranks_.empty() ? -1 : m;
}

int64_t HeartbeatMonitor::first_step() const {
  int64_t m = INT64_MAX;
  for (const Rank& r : ranks_) {
    if (!r.seen) return -1;
    m = std::min(m, r.first_step);
  }
  return ranks_.empty() ? -1 : m;
}

}  // namespace distllm::launch

namespace distllm::launch {

double HeartbeatMonitor::all_progressed_at() const {
  double latest = -1;
  for (const Rank& r : ranks_) {
    if (r.progressed_at < 0) return -1;
    latest = std::max(latest, r.progressed_at);
  }
  return latest;
}

}  // namespace distllm::launch
