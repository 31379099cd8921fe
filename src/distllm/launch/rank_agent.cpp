#include "distllm/launch/rank_agent.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "distllm/base/log.h"
#include "distllm/base/peer_wait.h"
#include "distllm/base/strings.h"

namespace distllm::launch {

std::string progress_file(const std::string& dir, int rank) { return dir + strprintf("/rank_%d", rank); }
std::string liveness_file(const std::string& dir, int rank) { return dir + strprintf("/alive_%d", rank); }
std::string lease_file(const std::string& dir) { return dir + "/launcher"; }

double unix_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void write_beat_file(const std::string& path, const std::string& line) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return;  // a full disk must not stop training; the launcher then sees no beat
  std::fputs(line.c_str(), f);
  std::fclose(f);
  std::rename(tmp.c_str(), path.c_str());
}

RankAgent::RankAgent(int rank) : rank_(rank) {
  const char* dir = std::getenv("DISTLLM_HEARTBEAT_DIR");
  if (dir == nullptr || *dir == '\0') return;
  dir_ = dir;
  if (const char* s = std::getenv("DISTLLM_LAUNCHER_LEASE_S")) {
    const double v = std::atof(s);
    if (v > 0) lease_s_ = v;
  }
  thread_ = std::thread([this] { watch(); });
}

RankAgent::~RankAgent() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void RankAgent::step_done(int64_t step) {
  if (dir_.empty()) return;
  if (start_step_ < 0) start_step_ = step;
  write_beat_file(progress_file(dir_, rank_),
                  strprintf("%lld %.3f %lld\n", (long long)step, unix_time_now(), (long long)start_step_));
}

bool RankAgent::lease_fresh(double now) {
  double renewed = 0;
  if (FILE* f = std::fopen(lease_file(dir_).c_str(), "r")) {
    if (std::fscanf(f, "%lf", &renewed) != 1) renewed = 0;
    std::fclose(f);
  }
  if (renewed > 0) lease_seen_ = std::max(lease_seen_, renewed);
  // No lease seen yet (a launcher that writes none, or a folder this host cannot
  // see): nothing to enforce.
  return lease_seen_ == 0 || now - lease_seen_ <= lease_s_;
}

void RankAgent::watch() {
  double asked_to_stop = 0;
  while (!stop_) {
    const double now = unix_time_now();
    const PeerWaitState w = peer_wait_state();
    write_beat_file(liveness_file(dir_, rank_), strprintf("%.3f %d %.3f\n", now, w.waiting, w.since));
    if (!lease_fresh(now)) {
      if (asked_to_stop == 0) {
        asked_to_stop = now;
        LOG_ERROR("rank %d: the launcher stopped renewing its lease for %.0f s (killed?); stopping this rank", rank_,
                  lease_s_);
        std::raise(SIGTERM);  // as a scheduler's stop: save if it can, then exit
      } else if (now - asked_to_stop > lease_s_) {
        LOG_ERROR("rank %d: still running %.0f s after its launcher went away; exiting", rank_, now - asked_to_stop);
        std::fflush(nullptr);
        ::_exit(1);
      }
    }
    for (int i = 0; i < 10 && !stop_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace distllm::launch
