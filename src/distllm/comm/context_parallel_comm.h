// ContextParallelComm (base/context_parallel_comm.h) over a ProcessGroup: the cp
// group of a DeviceMesh, as a ring in group rank order.
#pragma once

#include "distllm/base/context_parallel_comm.h"
#include "distllm/comm/process_group.h"

namespace distllm::comm {

class GroupContextParallelComm : public ContextParallelComm {
 public:
  explicit GroupContextParallelComm(ProcessGroupPtr group);
  int size() const override { return group_->size(); }
  int rank() const override { return group_->rank(); }
  // Both directions in one asynchronous batch_p2p, run by the group's thread.
  void start_ring_shift(const float* send, float* recv, int64_t n) override;
  void finish_ring_shift() override;

 private:
  ProcessGroupPtr group_;
  WorkPtr pending_;
};

}  // namespace distllm::comm
