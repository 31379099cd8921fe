// The communication of context parallelism (ring attention) over its cp group: a
// ring, rank r sending to r + 1 and receiving from r - 1. In base/ so that model/
// (which computes) and comm/ (which implements it over a ProcessGroup) need not know
// each other. A failure (a lost rank, a timeout) throws.
#pragma once

#include <cstdint>

namespace distllm {

class ContextParallelComm {
 public:
  virtual ~ContextParallelComm() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // Sends n floats to the next rank and receives n from the previous one (at once,
  // so every rank of the ring may call it together). send and recv must not overlap.
  // start_ring_shift returns at once, so the caller can compute while the blocks
  // travel; until finish_ring_shift returns, send must stay unchanged and recv
  // unread. One shift at a time.
  virtual void start_ring_shift(const float* send, float* recv, int64_t n) = 0;
  virtual void finish_ring_shift() = 0;
  void ring_shift(const float* send, float* recv, int64_t n) {
    start_ring_shift(send, recv, n);
    finish_ring_shift();
  }
};

}  // namespace distllm
