#include "distllm/launch/heartbeat_monitor.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "distllm/base/strings.h"
#include "distllm/launch/rank_agent.h"

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

void HeartbeatMonitor::read_progress(size_t i, double now) {
  Rank& r = ranks_[i];
  FILE* f = std::fopen(progress_file(dir_, static_cast<int>(i)).c_str(), "r");
  if (f == nullptr) return;
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

void HeartbeatMonitor::read_liveness(size_t i) {
  Rank& r = ranks_[i];
  FILE* f = std::fopen(liveness_file(dir_, static_cast<int>(i)).c_str(), "r");
  if (f == nullptr) return;
  double when = 0, since = 0;
  int waiting = 0;
  if (std::fscanf(f, "%lf %d %lf", &when, &waiting, &since) >= 2) {
    r.alive_at = when;
    r.waiting = waiting > 0;
  }
  std::fclose(f);
}

std::string HeartbeatMonitor::poll(double now) {
  const double unix_now = unix_time_now();
  bool liveness = false;  // the ranks report it (distllm's own; another command may not)
  for (size_t i = 0; i < ranks_.size(); ++i) {
    read_progress(i, now);
    read_liveness(i);
    liveness |= ranks_[i].alive_at > 0;
  }
  // The ranks that stopped making progress, the longest idle first.
  std::vector<size_t> stalled;
  for (size_t i = 0; i < ranks_.size(); ++i)
    if (idle(i, now) > hang_timeout_s_) stalled.push_back(i);
  if (stalled.empty()) return "";
  std::stable_sort(stalled.begin(), stalled.end(), [&](size_t a, size_t b) { return idle(a, now) > idle(b, now); });
  for (size_t i : stalled)
    if (!ranks_[i].seen) return strprintf("rank %zu did not start within %.0f s (no heartbeat)", i, idle(i, now));
  if (liveness) {
    // Who is to blame: a rank whose liveness stopped (dead, stopped, wedged) ...
    size_t quiet = ranks_.size();
    for (size_t i = 0; i < ranks_.size(); ++i)
      if (unix_now - ranks_[i].alive_at > kLivenessStaleS &&
          (quiet == ranks_.size() || ranks_[i].alive_at < ranks_[quiet].alive_at))
        quiet = i;
    if (quiet < ranks_.size())
      return strprintf("rank %zu stopped responding: no liveness beat for %.0f s (last step %lld; dead, stopped or "
                       "wedged)",
                       quiet, unix_now - ranks_[quiet].alive_at, (long long)ranks_[quiet].step);
    // ... or, every rank alive, the one not waiting while the others wait for it.
    std::vector<size_t> busy;
    for (size_t i : stalled)
      if (!ranks_[i].waiting) busy.push_back(i);
    if (!busy.empty() && busy.size() < ranks_.size())
      return strprintf("rank %zu made no progress for %.0f s (last step %lld) while the other ranks wait for it",
                       busy[0], idle(busy[0], now), (long long)ranks_[busy[0]].step);
    if (busy.empty())
      return strprintf("no rank made progress for %.0f s and every rank waits on its peers (a deadlock: mismatched "
                       "collectives?); lowest step %lld",
                       idle(stalled[0], now), (long long)min_step());
  }
  const size_t w = stalled[0];
  return strprintf("rank %zu made no progress for %.0f s (last step %lld)", w, idle(w, now), (long long)ranks_[w].step);
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
