// `distllm launch`: starts N ranks of a command (mpirun on one machine, srun inside
// a Slurm allocation), supervises them, and restarts the job from its latest
// checkpoint when a rank dies or hangs, as torchrun's elastic agent does.
//
// Each attempt k writes <log_dir>/attempt_<k>/rank_<r>.log (the rank's stdout and
// stderr) and launcher.log (mpirun's own output); rank 0's lines are echoed live.
// Ranks find the heartbeat directory in DISTLLM_HEARTBEAT_DIR and the attempt
// number in DISTLLM_RESTART_COUNT (0 for the first).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace distllm::launch {

struct LaunchOptions {
  int ranks = 1;
  int max_restarts = 0;
  double hang_timeout_s = 300;
  double kill_grace_s = 10;  // SIGTERM, then SIGKILL after this long
  // Ranks stop when the launcher has not renewed its lease for this long (rank_agent.h).
  double lease_timeout_s = 10;
  std::string log_dir = "launch_logs";
  std::string launcher = "auto";  // auto | mpirun | srun
  std::string srun_mpi = "pmix";  // srun --mpi=...
  std::vector<std::string> extra_launcher_args;
  // Inside a Slurm batch job (SLURM_JOB_ID): after SIGUSR1 (the preemption warning
  // of `sbatch --signal=B:USR1@T`) has made the ranks save and stop, requeue the job
  // with `scontrol requeue`; its rerun resumes. SIGTERM never requeues: that is a
  // cancel, or Slurm's own preemption, which requeues by itself.
  bool slurm_requeue = false;
  std::vector<std::string> command;  // the rank command: distllm train ...
};

struct LaunchResult {
  int exit_code = 0;      // 0: the job finished; else its last exit code (or 1)
  int restarts = 0;
  std::string reason;     // why it stopped: "finished", "rank 1 killed by signal 9; no restarts left", ...
  std::vector<double> recovery_s;  // per restart: failure seen -> first new step
};

// The full argv of one attempt (the launcher, its flags, the per-rank log wrapper
// and the command), for tests and --dry-run. `resume`: the command resumes from the
// job's checkpoints (`--resume auto` in place of any --resume given, when it has a
// --checkpoint-dir), as a restart after an attempt that started training does.
std::vector<std::string> attempt_argv(const LaunchOptions& options, bool resume);

// "srun" or "mpirun": what --launcher auto means here (srun inside a Slurm allocation).
std::string resolved_launcher(const LaunchOptions& options);

// Runs the job until it succeeds or the restarts are used up. `echo` receives
// rank 0's output lines and the launcher's own notes.
LaunchResult run_launch(const LaunchOptions& options, const std::function<void(const std::string&)>& echo);

}  // namespace distllm::launch
