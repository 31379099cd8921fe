// A serve_test_server child process for the router tests. It prints "listening on
// PORT" once it serves; it exits when its stdin closes (the destructor does that, so
// a test killed mid-way takes its servers along), or at once with kill9(). stop()
// and resume() freeze and thaw it (SIGSTOP/SIGCONT: a hung process whose sockets
// still accept connections).
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

namespace distllm::router {

struct TestServerProcess {
  pid_t pid = -1;
  int stdin_fd = -1;
  int port = 0;

  // `flags` follow the binary (give --port; 0: any free port).
  void start(const std::vector<std::string>& flags) {
    int in[2], out[2];
    ASSERT_EQ(pipe(in), 0);
    ASSERT_EQ(pipe(out), 0);
    std::vector<std::string> args = {SERVE_TEST_SERVER};
    args.insert(args.end(), flags.begin(), flags.end());
    pid = fork();
    if (pid == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      // Nothing else of the parent's: another server's stdin pipe held open here
      // would keep that server from seeing EOF when the test closes it.
      for (int fd = 3; fd < 1024; ++fd) close(fd);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    stdin_fd = in[1];
    std::string line;
    char ch;
    while (read(out[0], &ch, 1) == 1 && ch != '\n') line += ch;
    close(out[0]);
    ASSERT_EQ(std::sscanf(line.c_str(), "listening on %d", &port), 1) << line;
  }
  void kill9() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      close(stdin_fd);
      pid = -1;
    }
  }
  void stop() {
    if (pid > 0) kill(pid, SIGSTOP);
  }
  void resume() {
    if (pid > 0) kill(pid, SIGCONT);
  }
  ~TestServerProcess() {
    if (pid > 0) {
      kill(pid, SIGCONT);  // a stopped process would never see its stdin close
      close(stdin_fd);
      waitpid(pid, nullptr, 0);
    }
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
};

}  // namespace distllm::router
