// Tensor parallelism over a ProcessGroup: the collectives a tensor-parallel graph
// needs (model/tensor_parallel.h), and moving parameters between shards and the
// whole model.
#pragma once

#include "distllm/comm/process_group.h"
#include "distllm/model/tensor_parallel.h"
#include "distllm/train/comm_tracker.h"

namespace distllm {

// TensorParallelComm over the tp group. Its collectives are blocking (they sit on
// the graph's critical path) and are counted by `tracker` when one is given.
class GroupTensorParallelComm : public TensorParallelComm {
 public:
  explicit GroupTensorParallelComm(comm::ProcessGroupPtr group, CommTracker* tracker = nullptr);
  void allreduce_sum(float* data, int64_t n) override;
  void allreduce_max(float* data, int64_t n) override;
  const comm::ProcessGroupPtr& group() const { return group_; }

 private:
  comm::ProcessGroupPtr group_;
  CommTracker* tracker_;
  void allreduce(float* data, int64_t n, comm::ReduceOp op);
};

// The whole model's flat parameters (plan.full_layout()) on every rank of the tp
// group, from each rank's shard (plan.local_layout()). Collective over `group`,
// whose rank r holds shard r.
void gather_tensor_parallel(comm::ProcessGroup& group, const TensorParallelPlan& plan, const float* local,
                            float* full);

}  // namespace distllm
