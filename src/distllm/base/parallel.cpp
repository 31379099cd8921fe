#include "distllm/base/parallel.h"

#include <immintrin.h>
#include <omp.h>
#include <sched.h>

#include <atomic>

// OpenBLAS's own knob; declared here so base/ does not need the cblas header.
extern "C" void openblas_set_num_threads(int) __attribute__((weak));

namespace distllm {
namespace {

std::atomic<int>& thread_count() {
  static std::atomic<int> n{available_cpus()};
  return n;
}

}  // namespace

int available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  int n = CPU_COUNT(&set);
  return n > 0 ? n : 1;
}

int num_threads() { return thread_count().load(std::memory_order_relaxed); }

bool in_parallel_region() { return omp_in_parallel() != 0; }

int team_rank() { return omp_get_thread_num(); }

int team_size() { return omp_get_num_threads(); }

void TeamBarrier::arrive_and_wait() {
  const uint32_t phase = phase_.load(std::memory_order_acquire);
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == parties_) {
    arrived_.store(0, std::memory_order_relaxed);  // before the release: the next phase counts from 0
    phase_.store(phase + 1, std::memory_order_release);
    return;
  }
  // ~20k pauses are a few hundred microseconds: longer than packing imbalance, short
  // enough that a thread whose partner lost its core soon gives the core away.
  for (int spins = 0; phase_.load(std::memory_order_acquire) == phase; ++spins) {
    if (spins < 20000)
      _mm_pause();
    else
      sched_yield();
  }
}

void set_num_threads(int n) {
  if (n < 1) n = 1;
  thread_count().store(n);
  omp_set_num_threads(n);
  if (openblas_set_num_threads != nullptr) openblas_set_num_threads(n);
}

}  // namespace distllm
