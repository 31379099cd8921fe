// Reads the heartbeat files ranks write (rank_agent.h: progress after every step,
// liveness every second) and says which rank stopped making progress, and why.
// Progress is the step changing, so a rank stuck in a collective or a kernel is
// seen even though its process is alive. Liveness names the culprit: when every
// rank stalls (they wait for each other), the rank whose liveness stopped (dead,
// SIGSTOPped), else the rank that is not waiting on its peers while they wait.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace distllm::launch {

class HeartbeatMonitor {
 public:
  // `hang_timeout_s`: how long a rank may go without a new step (and, before its
  // first heartbeat, how long it may take to start).
  HeartbeatMonitor(std::string dir, int world, double hang_timeout_s);

  // Starts a new attempt at time `now` (seconds, any monotonic clock): removes old
  // files and forgets what was seen.
  void reset(double now);
  // Reads every rank's file. Returns "" while all ranks progress, else why not
  // ("rank 1 made no progress for 30 s (last step 12) while the other ranks wait for it").
  std::string poll(double now);

  // The smallest step every rank has reported (-1 until all have reported), and
  // the smallest step they reported first in this attempt (the resumed step).
  int64_t min_step() const;
  int64_t first_step() const;
  // The unix time by which every rank had finished a step beyond the one it
  // started from (its first new step after a restart), from the ranks' own clocks;
  // -1 until then.
  double all_progressed_at() const;
  const std::string& dir() const { return dir_; }

 private:
  struct Rank {
    bool seen = false;
    int64_t step = -1;
    int64_t first_step = -1;
    double last_change = 0;
    double progressed_at = -1;  // file time of the first beat past first_step
    double alive_at = 0;        // unix time of its last liveness beat (0: none)
    bool waiting = false;       // blocked on its peers at that beat
  };
  // A rank whose liveness beat (every second) is older than this is not responding.
  static constexpr double kLivenessStaleS = 4.0;
  std::string dir_;
  double hang_timeout_s_;
  double started_ = 0;
  std::vector<Rank> ranks_;

  void read_progress(size_t rank, double now);
  void read_liveness(size_t rank);
  double idle(size_t rank, double now) const {
    const Rank& r = ranks_[rank];
    return now - (r.seen ? r.last_change : started_);
  }
};

}  // namespace distllm::launch
