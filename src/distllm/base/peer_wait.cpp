#include "distllm/base/peer_wait.h"

#include <chrono>
#include <mutex>

namespace distllm {
namespace {

std::mutex g_mu;
int g_waiting = 0;
double g_since = 0;

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

// A mutex, not atomics: a wait is a collective's length, far above a lock's cost,
// and the count and its start time must change together.
PeerWait::PeerWait() {
  std::lock_guard lock(g_mu);
  if (g_waiting++ == 0) g_since = unix_now();
}

PeerWait::~PeerWait() {
  std::lock_guard lock(g_mu);
  if (--g_waiting == 0) g_since = 0;
}

PeerWaitState peer_wait_state() {
  std::lock_guard lock(g_mu);
  return {g_waiting, g_since};
}

}  // namespace distllm
