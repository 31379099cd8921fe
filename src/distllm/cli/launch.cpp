// `distllm launch -n N [--max-restarts K] [--hang-timeout S] -- distllm train ...`:
// the job supervisor (see launch/launcher.h).
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "distllm/base/error.h"
#include "distllm/cli/command.h"
#include "distllm/launch/launcher.h"

namespace distllm {
namespace {

int run_launch_command(Args& args) {
  launch::LaunchOptions o;
  // Inside a Slurm allocation the default is the allocation's task count.
  const char* slurm_tasks = std::getenv("SLURM_NTASKS");
  o.ranks = static_cast<int>(args.get_int("n", slurm_tasks ? std::max(1, std::atoi(slurm_tasks)) : 1,
                                          "ranks to start (default: SLURM_NTASKS inside an allocation, else 1)"));
  o.max_restarts = static_cast<int>(args.get_int("max-restarts", 3, "restart the job this many times at most "
                                                                    "(each from the newest checkpoint)"));
  o.hang_timeout_s = args.get_double("hang-timeout", 300, "seconds a rank may go without finishing a step (or "
                                                          "starting) before the job is called hung and restarted");
  o.kill_grace_s = args.get_double("kill-grace", 10, "seconds between SIGTERM and SIGKILL when stopping a job");
  o.lease_timeout_s = args.get_double("lease-timeout", 10, "seconds the ranks outlive a launcher that stopped renewing "
                                      "its lease (killed): they then save and exit");
  o.log_dir = args.get_string("log-dir", "launch_logs", "per-attempt, per-rank logs go here");
  o.launcher = args.get_string("launcher", "auto", "auto (srun inside a Slurm allocation, else mpirun) | mpirun | "
                                                   "srun");
  o.srun_mpi = args.get_string("srun-mpi", "pmix", "the MPI plugin srun uses (--mpi=)");
  o.extra_launcher_args = args.get_list("launcher-arg", "an extra argument for mpirun/srun (repeatable)");
  const std::string requeue = args.get_string("slurm-requeue", "auto", "after SIGUSR1 made the ranks save and stop, "
                                                                       "`scontrol requeue` the job: auto (inside a "
                                                                       "Slurm batch job) | on | off");
  DL_CHECK(requeue == "auto" || requeue == "on" || requeue == "off",
           "--slurm-requeue must be auto, on or off, got '%s'", requeue.c_str());
  o.slurm_requeue = requeue == "on" || (requeue == "auto" && std::getenv("SLURM_JOB_ID") != nullptr);
  const bool dry_run = args.get_flag("dry-run", "print the command of the first attempt and exit");
  o.command = args.rest();
  if (args.help_or_finish()) return 0;
  DL_CHECK(!o.command.empty(), "no command: give it after --, e.g. distllm launch -n 2 -- distllm train ...");
  if (dry_run) {
    for (const std::string& a : launch::attempt_argv(o, /*resume=*/false)) std::printf("%s ", a.c_str());
    std::printf("\n");
    return 0;
  }
  launch::LaunchResult r = launch::run_launch(o, [](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  });
  std::string recovery;
  for (double s : r.recovery_s) recovery += strprintf("%s%.1f s", recovery.empty() ? "" : ", ", s);
  std::printf("launch: %s: %s (%d restart%s%s)\n", r.exit_code == 0 ? "done" : "failed", r.reason.c_str(),
              r.restarts, r.restarts == 1 ? "" : "s", recovery.empty() ? "" : ("; recovery " + recovery).c_str());
  return r.exit_code;
}

DISTLLM_REGISTER_COMMAND("launch", "start N ranks of a command, watch them, restart from the latest checkpoint",
                         run_launch_command);

}  // namespace
}  // namespace distllm
