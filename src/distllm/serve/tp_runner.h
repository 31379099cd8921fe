// Tensor-parallel serving (`mpirun -np N distllm serve --tp N`, docs/serving.md).
//
// Every rank holds one shard of the model (InferenceRunner with an
// InferenceTensorParallel: its heads, MLP columns, vocabulary rows and its part of
// the K/V cache). Rank 0 runs the HTTP server and the engine as without --tp; its
// runner is a TpLeaderRunner, which broadcasts each model call (serve/tp_step.h)
// before running its own shard of it. The other ranks loop in run_tp_worker,
// running the same calls on their shards, until rank 0 sends shutdown.
#pragma once

#include <memory>

#include "distllm/comm/process_group.h"
#include "distllm/comm/tensor_parallel_comm.h"
#include "distllm/model/inference.h"
#include "distllm/model/tensor_parallel.h"
#include "distllm/serve/model_runner.h"

namespace distllm::serve {

// This rank's part of the model over `group` (every rank of it is one tp rank): the
// plan and the collectives an InferenceRunner's shard points to. Outlives the runner.
// Throws distllm::Error naming the field when the model's heads do not split.
class TpShard {
 public:
  TpShard(comm::ProcessGroupPtr group, const ModelConfig& full);
  InferenceTensorParallel inference() { return {&plan_, &comm_}; }
  const TensorParallelPlan& plan() const { return plan_; }

 private:
  TensorParallelPlan plan_;
  comm::GroupTensorParallelComm comm_;
};

// Rank 0's runner: tells the other ranks of `group` about every model call, then
// runs its own shard of it. A communication failure (a lost rank, a timeout) ends
// the whole job loudly (comm::abort): no step can run without every shard.
class TpLeaderRunner : public ModelRunner {
 public:
  TpLeaderRunner(std::shared_ptr<ModelRunner> local, comm::ProcessGroupPtr group);
  ~TpLeaderRunner() override;

  KvGeometry kv_geometry() const override { return local_->kv_geometry(); }
  size_t kv_bytes_per_block(int block_size) const override { return local_->kv_bytes_per_block(block_size); }
  void allocate_kv(int num_blocks, int block_size) override;
  int vocab_size() const override { return local_->vocab_size(); }
  int max_context() const override { return local_->max_context(); }
  void execute(const std::vector<SequenceChunk>& batch, std::vector<float>& logits) override;
  // KV export/import (prefill/decode disaggregation) is not supported: each rank
  // holds only its heads' part of a block (the ModelRunner defaults throw).

  // Sends the workers home (once; also done by the destructor). Call after the
  // engine has stopped: no model call may follow.
  void shutdown_workers();

 private:
  std::shared_ptr<ModelRunner> local_;
  comm::ProcessGroupPtr group_;
  bool stopped_ = false;

  template <typename Fn>
  void guarded(const char* what, Fn&& fn);
};

// Ranks other than 0: runs rank 0's model calls on `local` (this rank's shard) until
// it sends shutdown. Between requests a worker waits as long as the server idles; a
// communication failure throws (the caller ends the job).
void run_tp_worker(ModelRunner& local, comm::ProcessGroup& group);

}  // namespace distllm::serve
