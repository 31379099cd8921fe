#include "distllm/io/mapping_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <mutex>

namespace distllm::mapping_guard {
namespace {

// A fixed table the signal handler can read without locks: a slot is live while
// `end` is non-zero. Registration is rare (file opens) and takes a mutex.
constexpr int kSlots = 4096;
struct Slot {
  std::atomic<uintptr_t> begin{0}, end{0};
  std::atomic<bool> faulted{false};
};
Slot g_slots[kSlots];
std::mutex g_mu;
struct sigaction g_previous;
std::once_flag g_installed;

void on_sigbus(int sig, siginfo_t* info, void* context) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Slot& s : g_slots) {
    const uintptr_t end = s.end.load(std::memory_order_acquire);
    if (end == 0 || at < s.begin.load(std::memory_order_relaxed) || at >= end) continue;
    // A page of the mapping lies past the file's end now: back it with zeros (mmap
    // is a plain system call, safe here) and let the read finish.
    const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    void* base = reinterpret_cast<void*>(at & ~(page - 1));
    if (::mmap(base, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED) break;
    s.faulted.store(true, std::memory_order_release);
    return;
  }
  // Not ours: whatever handled SIGBUS before (or the default: die with a core).
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction) return g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    return g_previous.sa_handler(sig);
  }
  ::signal(SIGBUS, SIG_DFL);
  ::raise(SIGBUS);
}

void install() {
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGBUS, &sa, &g_previous);
}

}  // namespace

int add(const void* begin, size_t size) {
  if (size == 0) return -1;
  std::call_once(g_installed, install);
  std::lock_guard lock(g_mu);
  for (int i = 0; i < kSlots; ++i) {
    Slot& s = g_slots[i];
    if (s.end.load(std::memory_order_relaxed) != 0) continue;
    s.faulted.store(false, std::memory_order_relaxed);
    s.begin.store(reinterpret_cast<uintptr_t>(begin), std::memory_order_relaxed);
    s.end.store(reinterpret_cast<uintptr_t>(begin) + size, std::memory_order_release);
    return i;
  }
  return -1;
}

void release(int slot) {
  if (slot < 0) return;
  std::lock_guard lock(g_mu);
  g_slots[slot].end.store(0, std::memory_order_release);
}

bool faulted(int slot) { return slot >= 0 && g_slots[slot].faulted.load(std::memory_order_acquire); }

}  // namespace distllm::mapping_guard
