// The groups a training job's --mesh makes: data-parallel ranks (what --strategy
// spreads the model over), the tensor-parallel group that splits each layer,
// the context-parallel ring that splits each sequence, and the pipeline that splits
// the layers into stages.
//
//   --mesh dp=2,tp=2 on 4 ranks: ranks {0,1} and {2,3} are tp groups (consecutive
//   ranks, on one host under mpirun/srun), {0,2} and {1,3} the dp groups.
//
// With context parallelism the ranks of a cp group hold blocks of the same
// sequences and the same parameters, so gradients are reduced over dp x cp: that
// flattened group is what `data_parallel` (DataParallel's world) is, while batches
// are drawn per dp coordinate only.
//
//   --mesh pp=2,dp=2 on 4 ranks: ranks {0,1} and {2,3} are the dp groups of stages
//   0 and 1, {0,2} and {1,3} the two pipelines (pp groups, ranked by stage).
//
//   --mesh pp=2,tp=2 on 4 ranks: {0,1} and {2,3} are the tp groups of stages 0 and
//   1, {0,2} and {1,3} the pipelines; each stage holds its layers' tp shards, and
//   a pipeline joins the ranks holding the same shard. cp works the same way: the
//   stages of a pipeline hold the same tokens of each sequence.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "distllm/comm/context_parallel_comm.h"
#include "distllm/comm/device_mesh.h"
#include "distllm/comm/tensor_parallel_comm.h"
#include "distllm/model/tensor_parallel.h"
#include "distllm/model/train_graph.h"
#include "distllm/train/pipeline_stage.h"

namespace distllm {

struct ModelParallelGroups {
  std::unique_ptr<comm::DeviceMesh> mesh;   // null: no --mesh (every rank data parallel)
  comm::ProcessGroupPtr data_parallel;      // dp (x cp); the world without a mesh (null for one process)
  std::unique_ptr<comm::GroupContextParallelComm> cp_comm;  // cp > 1 only
  std::optional<TensorParallelPlan> plan;   // tp > 1 only
  std::unique_ptr<comm::GroupTensorParallelComm> tp_comm;
  bool sequence_parallel = false;  // Megatron-SP inside the tp group
  PipelineStage pipeline;          // this rank's stage (pp > 1 only; the whole model otherwise)

  TensorParallel tensor_parallel() const { return {plan ? &*plan : nullptr, tp_comm.get(), sequence_parallel}; }
  ContextParallel context_parallel() const { return {cp_comm.get()}; }
  std::string describe() const;  // "dp=2 x tp=2"
};

// Data-parallel ranks of a --mesh on world_size ranks (world_size without a mesh):
// those that draw different batches.
int data_parallel_size(const std::string& mesh_text, int world_size);
// Ranks that reduce gradients together: dp x cp.
int gradient_reduction_size(const std::string& mesh_text, int world_size);

// Collective over `world` when mesh_text is given. Throws distllm::Error for a
// mesh that does not fit the world or the model (a head count tp cannot split, more
// pipeline stages, or model chunks: pp x virtual_stages, than layers).
// virtual_stages: model chunks per pipeline stage (the interleaved schedule).
ModelParallelGroups make_model_parallel_groups(const std::string& mesh_text, const comm::ProcessGroupPtr& world,
                                               const ModelConfig& config, bool sequence_parallel = false,
                                               int virtual_stages = 1);

}  // namespace distllm
