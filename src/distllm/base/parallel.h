// Thread count and parallel loops. distllm's kernels and OpenBLAS share one OpenMP
// thread pool; `set_num_threads` sizes both.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

namespace distllm {

// CPUs this process may run on (its affinity mask), at least 1.
int available_cpus();

// Threads used by parallel loops and by sgemm.
int num_threads();
void set_num_threads(int n);

// True inside one of the loops below (an OpenMP parallel region): a kernel called
// from a task runs on its own thread rather than opening a nested team.
bool in_parallel_region();

// Calls fn(i) for i in [begin, end), split into contiguous static chunks across the
// threads. The split depends only on (begin, end, num_threads()), so results are
// reproducible for a given thread count. Runs inline for tiny ranges.
template <typename Fn>
void parallel_for(int64_t begin, int64_t end, Fn&& fn) {
  if (end - begin <= 1 || num_threads() == 1) {
    for (int64_t i = begin; i < end; ++i) fn(i);
    return;
  }
#pragma omp parallel for schedule(static) num_threads(num_threads())
  for (int64_t i = begin; i < end; ++i) fn(i);
}

// Calls fn(chunk_begin, chunk_end, thread_index) once per thread with a contiguous
// share of [begin, end); useful when each thread keeps private scratch space.
template <typename Fn>
void parallel_chunks(int64_t begin, int64_t end, Fn&& fn) {
  int64_t n = end - begin;
  int threads = num_threads();
  if (n <= 0) return;
  if (threads == 1 || n == 1) {
    fn(begin, end, 0);
    return;
  }
  if (threads > n) threads = static_cast<int>(n);
#pragma omp parallel for schedule(static, 1) num_threads(threads)
  for (int t = 0; t < threads; ++t) {
    int64_t lo = begin + n * t / threads;
    int64_t hi = begin + n * (t + 1) / threads;
    fn(lo, hi, t);
  }
}

// The calling thread's place in the innermost parallel region: its index and the
// region's thread count (0 and 1 outside any region).
int team_rank();
int team_size();

// Calls fn(rank, size) once on every thread of one team that runs all at once, so
// its members may wait for one another (TeamBarrier), which parallel_chunks does
// not promise (its chunks may share a thread). size is the team the runtime granted:
// at most `threads`, possibly fewer, and the caller must cope with either.
template <typename Fn>
void parallel_team(int threads, Fn&& fn) {
  if (threads <= 1) {
    fn(0, 1);
    return;
  }
#pragma omp parallel num_threads(threads)
  fn(team_rank(), team_size());
}

// A barrier for members of a parallel_team (or any threads that run at once). It
// spins first: a futex wake-up reaches a sleeping vCPU tens of microseconds late,
// which the GEMM driver's barriers would pay several times a product. Then it
// yields, for teams larger than the cores (tests oversubscribe).
class TeamBarrier {
 public:
  explicit TeamBarrier(int parties) : parties_(parties) {}
  TeamBarrier(const TeamBarrier&) = delete;
  TeamBarrier& operator=(const TeamBarrier&) = delete;
  // Returns once all `parties` threads have called it in this phase.
  void arrive_and_wait();

 private:
  const int parties_;
  std::atomic<int> arrived_{0};
  std::atomic<uint32_t> phase_{0};
};

// Runs fn() on a new thread, waits for it, and returns its result (rethrowing what
// it threw). OpenMP keeps a pool of worker threads for every thread that opens a
// parallel region, for as long as that thread lives. Work done before a long-lived
// compute thread starts (loading and packing weights) goes here, so its pool goes
// away with the thread: otherwise libgomp counts more threads than cores and makes
// every worker sleep right after each region, and waking them costs more than a
// decode step's worth of small loops (seen as 16% of server time in futex calls).
template <typename Fn>
auto run_on_transient_thread(Fn&& fn) -> decltype(fn()) {
  using Result = decltype(fn());
  std::exception_ptr error;
  if constexpr (std::is_void_v<Result>) {
    std::thread([&] {
      try {
        fn();
      } catch (...) {
        error = std::current_exception();
      }
    }).join();
    if (error) std::rethrow_exception(error);
  } else {
    std::optional<Result> result;
    std::thread([&] {
      try {
        result.emplace(fn());
      } catch (...) {
        error = std::current_exception();
      }
    }).join();
    if (error) std::rethrow_exception(error);
    return std::move(*result);
  }
}

}  // namespace distllm
