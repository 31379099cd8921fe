// The collectives a tensor-parallel computation needs, over its tp group. It lives
// in base/ so that model/ (which computes) and comm/ (which implements it over a
// ProcessGroup) need not know each other. Every rank of the group calls them in the
// same order; a failure (a lost rank, a timeout) throws.
#pragma once

#include <cstdint>

namespace distllm {

class TensorParallelComm {
 public:
  virtual ~TensorParallelComm() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  virtual void allreduce_sum(float* data, int64_t n) = 0;
  virtual void allreduce_max(float* data, int64_t n) = 0;
  // out: size() blocks, block r of counts[r] floats from rank r, packed in rank
  // order; `in` holds counts[rank()] floats. In place when `in` is this rank's
  // block of `out`.
  virtual void allgatherv(const float* in, float* out, const int64_t* counts) = 0;
  // in: size() blocks packed in rank order (counts[r] floats each); out receives
  // the sum over ranks of block rank() (counts[rank()] floats).
  virtual void reduce_scatter_v(const float* in, float* out, const int64_t* counts) = 0;

  // Time spent in these collectives (all of it on the caller's thread: they block)
  // and bytes handed to them, since the last call; zero when not measured.
  struct Totals {
    double seconds = 0;
    int64_t bytes = 0;
  };
  virtual Totals take_totals() { return {}; }
};

}  // namespace distllm
