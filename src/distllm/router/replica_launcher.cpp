#include "distllm/router/replica_launcher.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>

#include "distllm/base/error.h"
#include "distllm/base/log.h"
#include "distllm/base/strings.h"
#include "distllm/base/subprocess.h"
#include "distllm/base/timer.h"

namespace distllm::router {
namespace {

// SIGTERM, then SIGKILL after grace_s; reaps the child.
void stop_child(pid_t pid, double grace_s) {
  if (pid <= 0) return;
  ::kill(-pid, SIGTERM);
  const double deadline = now_seconds() + grace_s;
  while (now_seconds() < deadline) {
    if (::waitpid(pid, nullptr, WNOHANG) == pid) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(-pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

std::string replica_log(const LaunchConfig& c, size_t i) { return strprintf("%s/replica_%zu.log", c.log_dir.c_str(), i); }

}  // namespace

ReplicaLauncher::ReplicaLauncher(LaunchConfig config) : config_(std::move(config)) {
  DL_CHECK(config_.count >= 1, "--launch must be at least 1, got %d", config_.count);
  DL_CHECK(!config_.exe.empty(), "route --launch: the distllm binary is unknown");
  if (config_.log_dir.empty()) config_.log_dir = "route_logs";
  std::filesystem::create_directories(config_.log_dir);
  replicas_.resize(static_cast<size_t>(config_.count));
}

ReplicaLauncher::~ReplicaLauncher() { stop(); }

bool ReplicaLauncher::start_one(size_t i, std::string& why) {
  Replica& r = replicas_[i];
  std::vector<std::string> argv = {config_.exe, "serve"};
  argv.insert(argv.end(), config_.serve_args.begin(), config_.serve_args.end());
  argv.insert(argv.end(), {"--host", config_.host, "--port", std::to_string(r.port)});
  SpawnOptions o;
  o.log_path = replica_log(config_, i);
  o.pipe_stdout = true;
  o.parent_death_signal = SIGTERM;
  Child child = spawn_process(argv, o);
  std::string line;
  int port = 0;
  // serve prints its address on stdout once it can take requests; anything else
  // there before that is ignored.
  const double deadline = now_seconds() + config_.ready_timeout_s;
  while (port == 0 && read_line(child.stdout_fd, line, std::max(0.0, deadline - now_seconds()))) {
    const size_t colon = line.rfind(':');
    if (line.rfind("listening on http://", 0) == 0 && colon != std::string::npos) port = std::atoi(line.c_str() + colon + 1);
  }
  ::close(child.stdout_fd);
  if (port <= 0) {
    stop_child(child.pid, 1);
    why = strprintf("replica %zu did not start within %.0f s (log: %s)", i, config_.ready_timeout_s,
                    o.log_path.c_str());
    return false;
  }
  r.pid = child.pid;
  r.port = port;
  return true;
}

std::vector<std::string> ReplicaLauncher::start() {
  std::vector<std::string> urls;
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < replicas_.size(); ++i) {
    std::string why;
    if (!start_one(i, why)) {
      for (Replica& r : replicas_) {
        stop_child(r.pid, config_.kill_grace_s);
        r.pid = -1;
      }
      throw Error("route --launch: " + why);
    }
    urls.push_back(strprintf("http://%s:%d", config_.host.c_str(), replicas_[i].port));
    LOG_INFO("route: replica %zu listening on %s (pid %d)", i, urls.back().c_str(), static_cast<int>(replicas_[i].pid));
  }
  return urls;
}

void ReplicaLauncher::supervise() { thread_ = std::thread([this] { loop(); }); }

void ReplicaLauncher::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::milliseconds(200));
    if (stop_) break;
    const double now = now_seconds();
    for (size_t i = 0; i < replicas_.size(); ++i) {
      Replica& r = replicas_[i];
      int status = 0;
      if (r.pid > 0 && ::waitpid(r.pid, &status, WNOHANG) == r.pid) {
        LOG_WARN("route: replica %zu (port %d) exited (%s); restarting in %.0f s", i, r.port,
                 WIFSIGNALED(status) ? strprintf("signal %d", WTERMSIG(status)).c_str()
                                     : strprintf("status %d", WEXITSTATUS(status)).c_str(),
                 r.backoff_s);
        r.pid = -1;
        r.restart_at = now + r.backoff_s;
      }
      if (r.pid <= 0 && now >= r.restart_at) {
        std::string why;
        // Starting waits for the model to load: done without the lock, so stop() is not held up.
        lock.unlock();
        const bool ok = start_one(i, why);
        lock.lock();
        if (ok) {
          ++restarts_;
          r.backoff_s = 1;
          LOG_INFO("route: replica %zu restarted on port %d", i, r.port);
        } else {
          r.backoff_s = std::min(30.0, r.backoff_s * 2);
          r.restart_at = now_seconds() + r.backoff_s;
          LOG_WARN("route: %s", why.c_str());
        }
        if (stop_) break;
      }
    }
  }
}

void ReplicaLauncher::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (Replica& r : replicas_) {
    stop_child(r.pid, config_.kill_grace_s);
    r.pid = -1;
  }
}

int ReplicaLauncher::restarts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return restarts_;
}

}  // namespace distllm::router
