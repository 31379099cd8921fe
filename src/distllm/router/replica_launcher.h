// `distllm route --launch N --model DIR`: starts N local `distllm serve` replicas,
// waits for each to listen, and restarts one that exits (on its old port, with a
// backoff that doubles up to 30 s) until the router stops. The replicas die with the
// router (PR_SET_PDEATHSIG) and are stopped with SIGTERM (their graceful drain),
// then SIGKILL after `kill_grace_s`.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace distllm::router {

struct LaunchConfig {
  std::string exe;                      // the distllm binary
  int count = 1;
  std::vector<std::string> serve_args;  // after `serve`: --model DIR, --threads T, ...
  std::string host = "127.0.0.1";
  std::string log_dir;                  // replica i logs to <log_dir>/replica_<i>.log
  double ready_timeout_s = 300;         // a replica must print "listening on" by then
  double kill_grace_s = 30;
};

class ReplicaLauncher {
 public:
  explicit ReplicaLauncher(LaunchConfig config);
  ~ReplicaLauncher();
  ReplicaLauncher(const ReplicaLauncher&) = delete;
  ReplicaLauncher& operator=(const ReplicaLauncher&) = delete;

  // Starts every replica (one after another: loading a model is memory-bound) and
  // returns their URLs. Throws distllm::Error naming the replica and its log if one
  // fails to start; those already started are stopped.
  std::vector<std::string> start();
  // Restarts replicas that exit, in the background, until stop().
  void supervise();
  // Stops the supervisor, then every replica.
  void stop();
  int restarts() const;

 private:
  struct Replica {
    pid_t pid = -1;
    int port = 0;  // 0: any free port (the first start)
    double restart_at = 0;
    double backoff_s = 1;
  };
  // Starts replica i and waits for its port; false (with `why`) on failure.
  bool start_one(size_t i, std::string& why);
  void loop();

  LaunchConfig config_;
  std::vector<Replica> replicas_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  int restarts_ = 0;
  std::thread thread_;
};

}  // namespace distllm::router
