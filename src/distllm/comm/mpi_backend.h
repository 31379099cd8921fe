// Internal: collectives as MPI nonblocking collectives, polled against the deadline
// (a blocking MPI call could never time out). bf16/f16 reductions are widened to
// f32 for the wire and rounded once at the end.
#pragma once

#include <mpi.h>

#include "distllm/base/aligned_buffer.h"
#include "distllm/comm/backend.h"

namespace distllm::comm {

class MpiBackend : public Backend {
 public:
  // Does not own `comm`. Ranks are comm's ranks.
  explicit MpiBackend(MPI_Comm comm);
  const char* name() const override { return "mpi"; }
  void run(const Op& op, const OpContext& ctx) override;

  // Pieces the hierarchical backend reuses.
  void allreduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op, int avg_divisor,
                 const OpContext& ctx, const char* detail);

 private:
  MPI_Comm comm_;
  int rank_, size_;
  std::vector<int> others_;
  AlignedBuffer<float> wide_in_, wide_out_;
  AlignedBuffer<uint8_t> bytes_;

  void wait(MPI_Request* req, const OpContext& ctx, const char* detail);
  void reduce(const Op& op, const OpContext& ctx);
  void reduce_scatter(const Op& op, const OpContext& ctx);
};

}  // namespace distllm::comm
