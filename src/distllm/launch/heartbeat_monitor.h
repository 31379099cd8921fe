// Reads the heartbeat files ranks write (`<dir>/rank_<r>`: "<step> <unix time>
// [<step it started from>]", rewritten after every step; see `distllm train`) and says which rank stopped
// making progress. Progress is the file's step changing, so a rank stuck in a
// collective or a kernel is seen even though its process is alive.
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
  // ("rank 1 made no progress for 30 s (last step 12)").
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
  };
  std::string dir_;
  double hang_timeout_s_;
  double started_ = 0;
  std::vector<Rank> ranks_;
};

}  // namespace distllm::launch
