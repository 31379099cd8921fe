#include "distllm/comm/context_parallel_comm.h"

#include "distllm/base/error.h"

namespace distllm::comm {

GroupContextParallelComm::GroupContextParallelComm(ProcessGroupPtr group) : group_(std::move(group)) {
  DL_CHECK(group_ != nullptr, "context parallelism needs a process group");
}

void GroupContextParallelComm::start_ring_shift(const float* send, float* recv, int64_t n) {
  DL_CHECK(pending_ == nullptr, "internal error: a ring shift is already in flight on '%s'", group_->name().c_str());
  const int size = group_->size(), rank = group_->rank();
  // Both posted at once (batch_p2p): every rank sends and receives in the same call.
  const P2POp ops[2] = {
      {P2POp::Kind::kSend, const_cast<float*>(send), static_cast<size_t>(n), DType::kF32, (rank + 1) % size},
      {P2POp::Kind::kRecv, recv, static_cast<size_t>(n), DType::kF32, (rank + size - 1) % size},
  };
  pending_ = group_->batch_p2p(ops, CallOptions{.async_op = true});
}

void GroupContextParallelComm::finish_ring_shift() {
  DL_CHECK(pending_ != nullptr, "internal error: no ring shift in flight on '%s'", group_->name().c_str());
  WorkPtr w = std::move(pending_);
  pending_.reset();
  w->wait();
}

}  // namespace distllm::comm
