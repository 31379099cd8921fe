// A rank's part of the model under tensor and pipeline parallelism, and the whole
// model's state made from the parts. A rank holds a tensor-parallel shard
// (TensorParallelPlan: slices of the whole tensors, some replicated), one pipeline
// stage's groups (ParamLayout of the stage; a tied table's copy on the last stage),
// or both (the stage of its tp shard). Initial weights, models loaded from disk and
// the model saved at the end deal in the whole model, so any tp or pp size trains
// and saves the same model: this part converts between the whole model's flat
// buffer and this rank's (to_local), gathers the whole from every part (gather),
// and weighs each local tensor in the gradient norm so the parts' sums count each
// whole tensor once (norm_weights).
//
// Checkpoints never hold the whole model on one rank: each rank writes what it
// holds, every tensor as the region of the whole tensor it is (checkpoint/region.h),
// and reads back the regions it holds from whatever layout wrote them (spans). A
// copy another rank also holds is written once (writes), so the regions of a
// checkpoint tile every tensor exactly.
#pragma once

#include <vector>

#include "distllm/checkpoint/shard_io.h"
#include "distllm/model/config.h"
#include "distllm/model/param_layout.h"
#include "distllm/model/train_graph.h"
#include "distllm/train/comm_tracker.h"
#include "distllm/train/pipeline_stage.h"

namespace distllm {

class WholeModel {
 public:
  // The flat layout of this rank's part of `config`: the pipeline stage of its tp
  // shard, its tp shard, or the whole model. Throws when the plan is for another
  // model or lacks its collectives.
  static ParamLayout local_layout(const ModelConfig& config, const TensorParallel& tp, const PipelineStage& pp);

  // `local` is local_layout(config, tp, pp) (it and tp's plan and comm outlive this).
  WholeModel(const ModelConfig& config, const ParamLayout& local, TensorParallel tp, PipelineStage pp);

  // Whether this rank holds only a part: then whole-model state needs converting.
  bool split() const { return tp_.plan != nullptr || pp_.active(); }
  const ParamLayout& whole_layout() const { return whole_; }

  // This rank's part of a whole flat buffer (whole_layout) into `local` (local
  // layout; padding zero).
  void to_local(const float* whole, float* local) const;
  // The whole flat buffer on every rank from every rank's `local` buffer.
  // Collective over the pp group (the stages' tensors assembled with one
  // all-reduce), then the tp group.
  void gather(const float* local, float* whole, CommTracker& tracker) const;
  // Per local tensor, its weight in the gradient norm: TensorParallelPlan::
  // norm_weight's, and 0 for a later stage's copy of a tied embedding (the first
  // stage's counts). Empty when nothing is split (all 1).
  std::vector<float> norm_weights() const;

  // The checkpoint layout of this rank's flat buffer: every local tensor with the
  // whole tensor's shape and the region of it held here (the whole tensor unless
  // tensor parallelism splits it).
  std::vector<checkpoint::ParamSpan> spans() const;
  // Whether this rank writes local tensor `t` to a checkpoint: not when another
  // rank writes the same elements (a tensor replicated over the tp group: its first
  // rank does; a key/value head several tp ranks share: the first of them; a later
  // pipeline stage's copy of a tied embedding: the first stage does).
  bool writes(const ParamTensor& t) const;

 private:
  const ModelConfig& config_;
  const ParamLayout& local_;
  TensorParallel tp_;
  PipelineStage pp_;
  ParamLayout whole_;

  const ParamLayout& tp_shard_layout() const;  // the tp shard's, before pipeline stages
  int tp_index(const ParamTensor& t) const;     // in the plan's tensors
};

}  // namespace distllm
