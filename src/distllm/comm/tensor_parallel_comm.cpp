#include "distllm/comm/tensor_parallel_comm.h"

#include <vector>

#include "distllm/base/error.h"
#include "distllm/base/timer.h"

namespace distllm::comm {

GroupTensorParallelComm::GroupTensorParallelComm(ProcessGroupPtr group) : group_(std::move(group)) {
  DL_CHECK(group_ != nullptr, "tensor parallelism needs a process group");
}

template <typename Fn>
void GroupTensorParallelComm::timed(int64_t bytes, Fn&& fn) {
  const double start = now_seconds();
  fn();
  totals_.seconds += now_seconds() - start;
  totals_.bytes += bytes;
}

void GroupTensorParallelComm::allreduce_sum(float* data, int64_t n) {
  timed(n * 4, [&] { group_->allreduce(data, static_cast<size_t>(n), DType::kF32, ReduceOp::kSum); });
}

void GroupTensorParallelComm::allreduce_max(float* data, int64_t n) {
  timed(n * 4, [&] { group_->allreduce(data, static_cast<size_t>(n), DType::kF32, ReduceOp::kMax); });
}

void GroupTensorParallelComm::allgatherv(const float* in, float* out, const int64_t* counts) {
  std::vector<size_t> c(counts, counts + group_->size());
  timed(counts[group_->rank()] * 4, [&] { group_->allgatherv(in, out, c, DType::kF32); });
}

void GroupTensorParallelComm::reduce_scatter_v(const float* in, float* out, const int64_t* counts) {
  std::vector<size_t> c(counts, counts + group_->size());
  int64_t total = 0;
  for (int64_t n : c) total += n;
  timed(total * 4, [&] { group_->reduce_scatter_v(in, out, c, DType::kF32, ReduceOp::kSum); });
}

GroupTensorParallelComm::Totals GroupTensorParallelComm::take_totals() {
  Totals t = totals_;
  totals_ = {};
  return t;
}

}  // namespace distllm::comm
