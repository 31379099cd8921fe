#include "distllm/train/tensor_parallel_group.h"

#include <vector>

#include "distllm/base/aligned_buffer.h"
#include "distllm/base/error.h"

namespace distllm {

GroupTensorParallelComm::GroupTensorParallelComm(comm::ProcessGroupPtr group, CommTracker* tracker)
    : group_(std::move(group)), tracker_(tracker) {
  DL_CHECK(group_ != nullptr, "tensor parallelism needs a process group");
}

void GroupTensorParallelComm::allreduce(float* data, int64_t n, comm::ReduceOp op) {
  auto run = [&] { group_->allreduce(data, static_cast<size_t>(n), comm::DType::kF32, op); };
  if (tracker_)
    tracker_->blocking(n * 4, run);
  else
    run();
}

void GroupTensorParallelComm::allreduce_sum(float* data, int64_t n) { allreduce(data, n, comm::ReduceOp::kSum); }
void GroupTensorParallelComm::allreduce_max(float* data, int64_t n) { allreduce(data, n, comm::ReduceOp::kMax); }

void gather_tensor_parallel(comm::ProcessGroup& group, const TensorParallelPlan& plan, const float* local,
                            float* full) {
  const int n = group.size();
  DL_CHECK(n == plan.size() && group.rank() == plan.rank(), "the tp group does not match the tensor-parallel plan");
  // Shards differ in size when the MLP width or the vocabulary splits unevenly.
  std::vector<TensorParallelPlan> plans;
  std::vector<size_t> counts;
  for (int r = 0; r < n; ++r) {
    plans.emplace_back(plan.full(), n, r);
    counts.push_back(static_cast<size_t>(plans.back().local_layout().total_size()));
  }
  size_t total = 0;
  for (size_t c : counts) total += c;
  AlignedBuffer<float> all(total);
  group.allgatherv(local, all.data(), counts, comm::DType::kF32);
  size_t at = 0;
  for (int r = 0; r < n; ++r) {
    plans[static_cast<size_t>(r)].local_to_full(all.data() + at, full);
    at += counts[static_cast<size_t>(r)];
  }
}

}  // namespace distllm
