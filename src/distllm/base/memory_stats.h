// Bytes held in AlignedBuffers: what training and serving allocate for parameters,
// gradients, optimizer state, activations and communication buffers (not the
// program, libraries, MPI or small containers). `distllm plan` predicts this figure
// and the tests compare the two, as PyTorch's max_memory_allocated is compared with
// a memory estimate.
#pragma once

#include <atomic>
#include <cstdint>

namespace distllm {

class MemoryStats {
 public:
  static int64_t current() { return current_.load(std::memory_order_relaxed); }
  static int64_t peak() { return peak_.load(std::memory_order_relaxed); }
  // Starts a new peak measurement from the current figure.
  static void reset_peak() { peak_.store(current(), std::memory_order_relaxed); }

  static void on_alloc(int64_t bytes) {
    int64_t now = current_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    int64_t p = peak_.load(std::memory_order_relaxed);
    while (now > p && !peak_.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
    }
  }
  static void on_free(int64_t bytes) { current_.fetch_sub(bytes, std::memory_order_relaxed); }

 private:
  static inline std::atomic<int64_t> current_{0};
  static inline std::atomic<int64_t> peak_{0};
};

// Peak resident set size of this process (VmHWM), bytes; 0 if unknown.
int64_t peak_rss_bytes();

// Memory this process may use at most: physical RAM, or the cgroup's limit when it
// is lower (containers, Slurm's cgroup plugin). Allocations larger than this are
// refused up front rather than left to the OOM killer.
int64_t usable_memory_bytes();

}  // namespace distllm
