// Starting child processes: one place for fork/exec, their output and their group.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace distllm {

struct SpawnOptions {
  // Where the child's stdout and stderr go (truncated); empty: inherited.
  std::string log_path;
  // Give stdout a pipe instead (its read end is returned); stderr still goes to log_path.
  bool pipe_stdout = false;
  std::vector<std::pair<std::string, std::string>> env;  // set in the child
  bool own_process_group = true;  // the child leads a new group (signal it as -pid)
  int parent_death_signal = 0;    // e.g. SIGTERM: sent to the child if this thread's process dies
};

struct Child {
  pid_t pid = -1;
  int stdout_fd = -1;  // with pipe_stdout
};

// execvp(argv[0], argv). Throws distllm::Error if fork fails; an exec failure makes
// the child print why and exit 127.
Child spawn_process(const std::vector<std::string>& argv, const SpawnOptions& options);

// Reads one line (without its '\n') from fd, waiting at most timeout_s. Returns false
// on EOF or timeout.
bool read_line(int fd, std::string& line, double timeout_s);

}  // namespace distllm
