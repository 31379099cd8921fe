#include "distllm/serve/api/shutdown_signals.h"

#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <cstring>

#include "distllm/base/error.h"
#include "distllm/base/log.h"

namespace distllm::serve::api {
namespace {

// The handler may only do async-signal-safe things: count, write a byte, _exit.
std::atomic<int> g_signals{0};
int g_wake_fd = -1;
constexpr char kQuit = 0;  // from the destructor: no signal came

void on_signal(int sig) {
  if (g_signals.fetch_add(1) > 0) _exit(128 + sig);
  char c = static_cast<char>(sig);
  [[maybe_unused]] ssize_t n = ::write(g_wake_fd, &c, 1);
}

}  // namespace

ShutdownOnSignals::ShutdownOnSignals(ApiServer& server, double drain_timeout_s) {
  DL_CHECK(::pipe2(pipe_, O_CLOEXEC) == 0, "cannot create a pipe: %s", std::strerror(errno));
  g_signals = 0;
  g_wake_fd = pipe_[1];
  watcher_ = std::thread([this, &server, drain_timeout_s] { watch(server, drain_timeout_s); });
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

ShutdownOnSignals::~ShutdownOnSignals() {
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  char c = kQuit;
  [[maybe_unused]] ssize_t n = ::write(pipe_[1], &c, 1);
  watcher_.join();
  g_wake_fd = -1;
  ::close(pipe_[0]);
  ::close(pipe_[1]);
}

void ShutdownOnSignals::watch(ApiServer& server, double drain_timeout_s) {
  char c = kQuit;
  while (::read(pipe_[0], &c, 1) < 0 && errno == EINTR) {
  }
  if (c == kQuit) return;
  LOG_INFO("serve: %s: draining (up to %g s; a second signal exits at once)", strsignal(c), drain_timeout_s);
  bool drained = server.shutdown_gracefully(drain_timeout_s);
  LOG_INFO("serve: %s", drained ? "every request finished" : "requests still running were ended");
}

}  // namespace distllm::serve::api
