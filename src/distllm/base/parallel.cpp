#include "distllm/base/parallel.h"

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

void set_num_threads(int n) {
  if (n < 1) n = 1;
  thread_count().store(n);
  omp_set_num_threads(n);
  if (openblas_set_num_threads != nullptr) openblas_set_num_threads(n);
}

}  // namespace distllm
