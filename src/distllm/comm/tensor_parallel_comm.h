// TensorParallelComm (base/tensor_parallel_comm.h) over a ProcessGroup: the tp
// group of a DeviceMesh. Blocking collectives: they sit on the computation's
// critical path.
#pragma once

#include <chrono>
#include <cstdint>

#include "distllm/base/tensor_parallel_comm.h"
#include "distllm/comm/process_group.h"

namespace distllm::comm {

class GroupTensorParallelComm : public TensorParallelComm {
 public:
  explicit GroupTensorParallelComm(ProcessGroupPtr group);
  int size() const override { return group_->size(); }
  int rank() const override { return group_->rank(); }
  void allreduce_sum(float* data, int64_t n) override;
  void allreduce_max(float* data, int64_t n) override;
  void allgatherv(const float* in, float* out, const int64_t* counts) override;
  void reduce_scatter_v(const float* in, float* out, const int64_t* counts) override;
  const ProcessGroupPtr& group() const { return group_; }

  Totals take_totals() override;

 private:
  ProcessGroupPtr group_;
  Totals totals_;
  template <typename Fn>
  void timed(int64_t bytes, Fn&& fn);
};

}  // namespace distllm::comm
