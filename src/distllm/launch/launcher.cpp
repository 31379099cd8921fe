#include "distllm/launch/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"
#include "distllm/base/subprocess.h"
#include "distllm/launch/heartbeat_monitor.h"
#include "distllm/launch/rank_agent.h"

namespace distllm::launch {

namespace fs = std::filesystem;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Unix time, the clock the ranks' heartbeats use.
double wall_clock_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A signal to the launcher (Ctrl-C, Slurm's preemption warning) is passed on to
// the job, which saves and exits; the launcher then stops without restarting.
std::atomic<int> g_forward_signal{0};
void on_signal(int sig) { g_forward_signal.store(sig); }

bool program_on_path(const char* name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return false;
  for (const std::string& dir : split(path, ':'))
    if (!dir.empty() && ::access((dir + "/" + name).c_str(), X_OK) == 0) return true;
  return false;
}

std::string attempt_dir(const LaunchOptions& o, int attempt) {
  return (fs::path(o.log_dir) / strprintf("attempt_%d", attempt)).string();
}

// The rank command of an attempt: a restart resumes from the job's checkpoints.
std::vector<std::string> rank_command(const LaunchOptions& o, bool resume) {
  std::vector<std::string> cmd;
  bool checkpoints = false;
  for (size_t i = 0; i < o.command.size(); ++i) {
    const std::string& a = o.command[i];
    checkpoints |= a == "--checkpoint-dir" || a.rfind("--checkpoint-dir=", 0) == 0;
    if (resume && a == "--resume") {
      ++i;  // and its value
      continue;
    }
    if (resume && a.rfind("--resume=", 0) == 0) continue;
    cmd.push_back(a);
  }
  if (resume && checkpoints) {
    cmd.push_back("--resume");
    cmd.push_back("auto");
  }
  return cmd;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Why an attempt failed, from mpirun's report and the ranks' logs.
std::string failure_reason(const std::string& dir, int status, int ranks) {
  std::string why;
  std::string launcher_log = read_text(dir + "/launcher.log");
  std::smatch m;
  static const std::regex by_signal(R"(process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+))");
  static const std::regex by_code(R"(Process name: \[\[\d+,\d+\],(\d+)\]\s+Exit code:\s+(\d+))");
  if (std::regex_search(launcher_log, m, by_signal)) {
    why = strprintf("rank %s killed by signal %s", m[1].str().c_str(), m[2].str().c_str());
  } else if (std::regex_search(launcher_log, m, by_code)) {
    why = strprintf("rank %s exited with code %s", m[1].str().c_str(), m[2].str().c_str());
  } else if (WIFSIGNALED(status)) {
    why = strprintf("the job was killed by signal %d", WTERMSIG(status));
  } else {
    why = strprintf("the job exited with code %d", WEXITSTATUS(status));
  }
  // The first rank that printed an error says what went wrong.
  for (int r = 0; r < ranks; ++r) {
    std::string log = read_text(dir + strprintf("/rank_%d.log", r));
    size_t at = std::string::npos;
    for (const char* marker : {"aborting the job: ", "Error: ", "error: "}) {
      at = log.rfind(marker);
      if (at != std::string::npos) {
        if (marker[0] == 'a') at += std::strlen(marker);
        break;
      }
    }
    if (at == std::string::npos) continue;
    size_t end = log.find('\n', at);
    why += strprintf(" (rank %d: %s)", r, log.substr(at, end == std::string::npos ? end : end - at).c_str());
    break;
  }
  return why;
}

// Every process below `root` (from /proc). mpirun may put ranks in process groups
// of their own, so signalling the job's group alone could leave them running.
std::vector<pid_t> descendants(pid_t root) {
  std::vector<std::pair<pid_t, pid_t>> parent_of;  // (pid, ppid)
  for (const auto& e : fs::directory_iterator("/proc", fs::directory_options::skip_permission_denied)) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string stat = read_text(e.path().string() + "/stat");
    size_t close = stat.rfind(')');  // the command name may hold spaces and parentheses
    if (close == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %d", &state, &ppid) == 2)
      parent_of.emplace_back(static_cast<pid_t>(std::atoi(name.c_str())), static_cast<pid_t>(ppid));
  }
  std::vector<pid_t> out{root};
  for (size_t i = 0; i < out.size(); ++i)
    for (const auto& [pid, ppid] : parent_of)
      if (ppid == out[i]) out.push_back(pid);
  out.erase(out.begin());
  return out;
}

void signal_job(pid_t pid, const std::vector<pid_t>& known, int sig) {
  ::kill(-pid, sig);
  for (pid_t p : known) ::kill(p, sig);
  for (pid_t p : descendants(pid)) ::kill(p, sig);
}

// SIGTERM to the whole job, SIGKILL after the grace period; reaps it.
int stop_job(pid_t pid, double grace_s) {
  const std::vector<pid_t> known = descendants(pid);
  signal_job(pid, known, SIGTERM);
  int status = 0;
  const double deadline = now_s() + grace_s;
  while (now_s() < deadline) {
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      for (pid_t p : known) ::kill(p, SIGKILL);  // stragglers
      ::kill(-pid, SIGKILL);
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  signal_job(pid, known, SIGKILL);
  ::waitpid(pid, &status, 0);
  return status;
}

// Echoes the new complete lines of a growing file.
class LogFollower {
 public:
  explicit LogFollower(std::string path) : path_(std::move(path)) {}
  void poll(const std::function<void(const std::string&)>& echo) {
    std::ifstream in(path_, std::ios::binary);
    if (!in) return;
    in.seekg(static_cast<std::streamoff>(offset_));
    std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t end = chunk.rfind('\n');
    if (end == std::string::npos) return;
    offset_ += end + 1;
    for (const std::string& line : split(chunk.substr(0, end), '\n')) echo(line);
  }

 private:
  std::string path_;
  size_t offset_ = 0;
};

// Puts this Slurm batch job back in the queue (`scontrol requeue`); Slurm then ends
// this run of the batch script, and the rerun (SLURM_RESTART_COUNT >= 1) resumes.
void requeue_slurm_job(LaunchResult& result, const std::function<void(const std::string&)>& echo) {
  const char* job = std::getenv("SLURM_JOB_ID");
  if (job == nullptr) {
    result.reason += "; not requeued: not inside a Slurm job (no SLURM_JOB_ID)";
    return;
  }
  echo(strprintf("launch: requeueing Slurm job %s; its next run resumes from the newest checkpoint", job));
  pid_t pid = ::fork();
  DL_CHECK(pid >= 0, "launch: fork failed: %s", std::strerror(errno));
  if (pid == 0) {
    ::execlp("scontrol", "scontrol", "requeue", job, static_cast<char*>(nullptr));
    std::fprintf(stderr, "launch: cannot run scontrol: %s\n", std::strerror(errno));
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    result.reason += strprintf("; Slurm job %s requeued", job);
  } else {
    result.exit_code = 1;
    result.reason += strprintf("; `scontrol requeue %s` failed, the job was NOT requeued", job);
  }
}

}  // namespace

std::string resolved_launcher(const LaunchOptions& o) {
  std::string which = o.launcher;
  if (which == "auto") which = std::getenv("SLURM_JOB_ID") && program_on_path("srun") ? "srun" : "mpirun";
  DL_CHECK(which == "mpirun" || which == "srun", "launch: --launcher must be auto, mpirun or srun, got '%s'",
           which.c_str());
  return which;
}

std::vector<std::string> attempt_argv(const LaunchOptions& o, bool resume) {
  const std::string which = resolved_launcher(o);
  std::vector<std::string> argv;
  if (which == "srun") {
    argv = {"srun", "--mpi=" + o.srun_mpi, "-n", std::to_string(o.ranks), "--kill-on-bad-exit=1"};
  } else {
    argv = {"mpirun", "--oversubscribe", "--bind-to", "none", "-n", std::to_string(o.ranks)};
    if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
    for (const char* v :
         {"DISTLLM_HEARTBEAT_DIR", "DISTLLM_RESTART_COUNT", "DISTLLM_ATTEMPT_DIR", "DISTLLM_LAUNCHER_LEASE_S"}) {
      argv.push_back("-x");
      argv.push_back(v);
    }
  }
  argv.insert(argv.end(), o.extra_launcher_args.begin(), o.extra_launcher_args.end());
  // Each rank's output goes to its own file, named by the rank the launcher gave it.
  argv.insert(argv.end(), {"sh", "-c",
                           "r=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${SLURM_PROCID:-0}}}; "
                           "exec \"$@\" > \"$DISTLLM_ATTEMPT_DIR/rank_$r.log\" 2>&1",
                           "distllm-rank"});
  std::vector<std::string> cmd = rank_command(o, resume);
  argv.insert(argv.end(), cmd.begin(), cmd.end());
  return argv;
}

LaunchResult run_launch(const LaunchOptions& o, const std::function<void(const std::string&)>& echo) {
  DL_CHECK(o.ranks >= 1, "launch: -n must be at least 1");
  DL_CHECK(o.max_restarts >= 0, "launch: --max-restarts must be >= 0");
  DL_CHECK(o.hang_timeout_s > 0, "launch: --hang-timeout must be positive");
  DL_CHECK(o.lease_timeout_s >= 2, "launch: --lease-timeout must be at least 2 s (the lease is renewed every second)");
  DL_CHECK(!o.command.empty(), "launch: no command (give it after --)");
  fs::create_directories(o.log_dir);
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGUSR1, on_signal);

  const bool srun = resolved_launcher(o) == "srun";
  HeartbeatMonitor monitor((fs::path(o.log_dir) / "heartbeat").string(), o.ranks, o.hang_timeout_s);
  LaunchResult result;
  double failed_at = -1;
  // Whether an attempt got past its start (every rank reported a step): only then
  // may the job have written checkpoints for a restart to resume. An attempt that
  // stopped before (a refused --checkpoint-dir, a bad flag) is rerun as given, so a
  // restart never turns a refusal into resuming checkpoints the job did not write.
  bool started = false;
  for (int attempt = 0;; ++attempt) {
    const std::string dir = attempt_dir(o, attempt);
    fs::create_directories(dir);
    monitor.reset(now_s());
    // The ranks' lease on this launcher (rank_agent.h): renewed every second, so a
    // launcher killed even by SIGKILL takes its ranks with it.
    auto renew_lease = [&] {
      write_beat_file(lease_file(monitor.dir()), strprintf("%.3f %d\n", unix_time_now(), (int)::getpid()));
    };
    renew_lease();
    double lease_renewed = now_s();
    std::vector<std::string> argv = attempt_argv(o, started);
    echo(strprintf("launch: attempt %d: %d rank%s, logs in %s", attempt, o.ranks, o.ranks == 1 ? "" : "s",
                   dir.c_str()));
    SpawnOptions spawn;
    spawn.log_path = dir + "/launcher.log";  // one process group: the whole job is signalled at once
    spawn.env = {{"DISTLLM_HEARTBEAT_DIR", monitor.dir()},
                 {"DISTLLM_RESTART_COUNT", std::to_string(attempt)},
                 {"DISTLLM_ATTEMPT_DIR", dir},
                 {"DISTLLM_LAUNCHER_LEASE_S", strprintf("%g", o.lease_timeout_s)}};
    // mpirun (or srun) goes when the launcher goes; mpirun then ends its ranks.
    spawn.parent_death_signal = SIGTERM;
    const pid_t pid = spawn_process(argv, spawn).pid;
    LogFollower rank0(dir + "/rank_0.log");
    int status = 0;
    std::string hang;
    bool recovered = failed_at < 0;
    int forwarded = 0;
    // Recovery: from seeing the failure to every rank's first new step.
    auto note_recovery = [&] {
      const double at = monitor.all_progressed_at();
      if (recovered || at < 0) return;
      recovered = true;
      result.recovery_s.push_back(at - failed_at);
      echo(strprintf("launch: recovered: every rank finished a new step %.1f s after the failure", at - failed_at));
    };
    for (;;) {
      if (::waitpid(pid, &status, WNOHANG) == pid) break;
      rank0.poll(echo);
      const double now = now_s();
      if (now - lease_renewed >= 1.0) {
        renew_lease();
        lease_renewed = now;
      }
      if (int sig = g_forward_signal.exchange(0)) {
        // Passed on once: the ranks save and exit; the launcher waits for them.
        // mpirun's ranks are our descendants and get it directly (mpirun itself
        // would kill them before they save). srun's tasks run under slurmstepd,
        // maybe on other nodes: srun passes SIGUSR1 on to every task, while a
        // SIGTERM to srun would end the step, so the ranks get SIGUSR1 (which they
        // treat as SIGTERM).
        forwarded = sig;
        if (srun)
          ::kill(pid, SIGUSR1);
        else
          for (pid_t p : descendants(pid)) ::kill(p, sig == SIGINT ? SIGTERM : sig);
        echo(strprintf("launch: got signal %d; asked the ranks to save and stop", sig));
      }
      hang = forwarded ? "" : monitor.poll(now);
      note_recovery();
      if (!hang.empty()) {
        echo("launch: " + hang + "; stopping the job");
        status = stop_job(pid, o.kill_grace_s);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    rank0.poll(echo);
    monitor.poll(now_s());
    note_recovery();
    started |= monitor.min_step() >= 0;
    const bool ok = hang.empty() && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (ok) {
      result.exit_code = 0;
      result.reason = forwarded ? strprintf("stopped by signal %d after the ranks saved", forwarded) : "finished";
      if (forwarded == SIGUSR1 && o.slurm_requeue) requeue_slurm_job(result, echo);
      return result;
    }
    failed_at = wall_clock_s();
    std::string why = hang.empty() ? failure_reason(dir, status, o.ranks) : hang;
    result.exit_code = WIFEXITED(status) && WEXITSTATUS(status) != 0 ? WEXITSTATUS(status) : 1;
    if (forwarded || attempt >= o.max_restarts) {
      result.reason = forwarded ? why + " after signal " + std::to_string(forwarded)
                                : why + strprintf("; no restarts left (%d used)", attempt);
      return result;
    }
    ++result.restarts;
    echo(strprintf("launch: %s; restarting (%d of %d)", why.c_str(), attempt + 1, o.max_restarts));
  }
}

}  // namespace distllm::launch
