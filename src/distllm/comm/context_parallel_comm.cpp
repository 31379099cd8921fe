#include "distllm/comm/context_parallel_comm.h"

#include "distllm/base/error.h"

namespace distllm::comm {

GroupContextParallelComm::GroupContextParallelComm(ProcessGroupPtr group) : group_(std::move(group)) {
  DL_CHECK(group_ != nullptr, "context parallelism needs a process group");
}

void GroupContextParallelComm::ring_shift(const float* send, float* recv, int64_t n) {
  const int size = group_->size(), rank = group_->rank();
  // Both posted at once (batch_p2p): every rank sends and receives in the same call.
  const P2POp ops[2] = {
      {P2POp::Kind::kSend, const_cast<float*>(send), static_cast<size_t>(n), DType::kF32, (rank + 1) % size},
      {P2POp::Kind::kRecv, recv, static_cast<size_t>(n), DType::kF32, (rank + size - 1) % size},
  };
  group_->batch_p2p(ops);
}

}  // namespace distllm::comm
