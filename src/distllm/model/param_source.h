// Where the training graph reads a parameter group and accumulates its gradients.
//
// A single process keeps every group in one flat buffer (Transformer). Sharded
// data parallelism (ZeRO-3) gathers a group into a temporary buffer just before it
// is used and reduces its gradients out of a temporary buffer, so the graph asks
// for each group's memory through this interface instead of indexing one buffer.
// Both pointers address the group's first parameter; the tensors inside follow
// ParamLayout (use its *_view functions).
#pragma once

namespace distllm {

class ParamSource {
 public:
  virtual ~ParamSource() = default;
  // The group's parameters. Valid from the TrainHooks call that announces the
  // group's use (before_group_forward / before_group_backward) until its release.
  virtual float* group_params(int group) = 0;
  // Where the group's gradients accumulate (+=); zero at the start of a step.
  virtual float* group_grads(int group) = 0;
};

}  // namespace distllm
