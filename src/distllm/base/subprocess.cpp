#include "distllm/base/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "distllm/base/error.h"
#include "distllm/base/timer.h"

namespace distllm {

Child spawn_process(const std::vector<std::string>& argv, const SpawnOptions& options) {
  DL_CHECK(!argv.empty(), "spawn_process: empty command");
  int out[2] = {-1, -1};
  if (options.pipe_stdout) DL_CHECK(::pipe2(out, O_CLOEXEC) == 0, "pipe failed: %s", std::strerror(errno));
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  DL_CHECK(pid >= 0, "fork failed: %s", std::strerror(errno));
  if (pid == 0) {
    if (options.own_process_group) ::setpgid(0, 0);
    if (options.parent_death_signal != 0) {
      ::prctl(PR_SET_PDEATHSIG, options.parent_death_signal);
      if (::getppid() != parent) ::_exit(1);  // the parent died before prctl
    }
    if (!options.log_path.empty()) {
      const int fd = ::open(options.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
    }
    if (options.pipe_stdout) ::dup2(out[1], 1);  // dup2 clears O_CLOEXEC on the copy
    for (const auto& [k, v] : options.env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "cannot run %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  if (options.own_process_group) ::setpgid(pid, pid);  // also here: no race with a signal to -pid
  Child child;
  child.pid = pid;
  if (options.pipe_stdout) {
    ::close(out[1]);
    child.stdout_fd = out[0];
  }
  return child;
}

bool read_line(int fd, std::string& line, double timeout_s) {
  line.clear();
  const double deadline = now_seconds() + timeout_s;
  for (;;) {
    const double left = deadline - now_seconds();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left * 1000) + 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    char c;
    const ssize_t n = ::read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    if (c == '\n') return true;
    line += c;
  }
}

}  // namespace distllm
