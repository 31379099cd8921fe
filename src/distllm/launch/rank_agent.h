// The rank's side of `distllm launch` (launcher.h): what a rank tells its launcher,
// and how it notices that the launcher is gone.
//
// Under a launcher (DISTLLM_HEARTBEAT_DIR set) each rank writes, in that folder:
//   rank_<r>   "<step> <unix time> <step it started from>", after every step:
//              progress (the launcher calls a rank hung when this stops changing);
//   alive_<r>  "<unix time> <threads waiting on peers> <since>", every second from a
//              thread of its own: liveness, and whether the rank is blocked in a
//              collective (base/peer_wait.h). When a job stalls, the launcher names
//              the rank whose liveness stopped (dead, stopped, wedged), or the rank
//              that is not waiting while the others wait for it.
// and reads the launcher's lease `launcher` ("<unix time> <pid>"), renewed every
// second. When, once seen, it is not renewed for DISTLLM_LAUNCHER_LEASE_S seconds (the
// launcher was killed, even with SIGKILL, on this host or another), the rank asks
// itself to stop as SIGTERM does (save, then exit) and, if it is still alive after
// as long again (stuck in a collective with peers that already left), exits.
// Without a launcher every call is a no-op.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

namespace distllm::launch {

// The names of the files in the heartbeat folder (shared with the launcher).
std::string progress_file(const std::string& dir, int rank);
std::string liveness_file(const std::string& dir, int rank);
std::string lease_file(const std::string& dir);
// Writes `line` to `path` whole (temp file + rename), so a reader never sees half.
void write_beat_file(const std::string& path, const std::string& line);
double unix_time_now();

class RankAgent {
 public:
  // Starts the liveness thread when DISTLLM_HEARTBEAT_DIR is set.
  explicit RankAgent(int rank);
  ~RankAgent();
  RankAgent(const RankAgent&) = delete;
  RankAgent& operator=(const RankAgent&) = delete;

  bool active() const { return !dir_.empty(); }
  // After every step (and once at the start, with the step resumed from).
  void step_done(int64_t step);

 private:
  int rank_;
  std::string dir_;
  double lease_s_ = 10;
  int64_t start_step_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;

  double lease_seen_ = 0;  // the newest renewal read (unix time); 0: none yet

  void watch();
  // True while the launcher's lease is fresh, or none was ever seen.
  bool lease_fresh(double now);
};

}  // namespace distllm::launch
