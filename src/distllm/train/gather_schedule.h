// When sharded parameters are gathered and freed (ZeRO-3 / FSDP full shard, and
// HSDP inside its shard group): the training graph announces each parameter
// group's use (TrainHooks), and this schedule answers with the ParamGatherer's
// prefetch, acquire and release, so at most a few groups are whole at once:
//
//   forward   group g: gather g (and the embedding with a tied head), prefetch g+1;
//             after it free g (with reshard-after-forward; the embedding always)
//   backward  group g: gather g again, prefetch g-1; free it once its gradients
//             are ready (the head with the tied embedding, then prefetch the last layer)
//
// Every rank visits the groups in the same order, so their gathers match. A
// pipeline stage prefetches only the groups it holds.
#pragma once

#include <memory>

#include "distllm/model/param_layout.h"
#include "distllm/train/param_gatherer.h"

namespace distllm {

struct GatherScheduleOptions {
  bool prefetch = true;               // gather the next group while computing
  bool reshard_after_forward = true;  // free gathered groups after forward
};

class GatherSchedule {
 public:
  GatherSchedule(const ParamLayout& layout, int n_layer, GatherScheduleOptions options, ParamGathererSetup setup);

  float* acquire(int group) { return gatherer_.acquire(group); }
  void before_forward(int group);
  void after_forward(int group, bool compute_grad);
  void before_backward(int group);
  // Group g's gradients are ready: its parameters are no longer needed.
  void after_backward(int group);
  void release_all() { gatherer_.release_all(); }

  const ParamGatherer& gatherer() const { return gatherer_; }
  ParamGatherer& gatherer() { return gatherer_; }

 private:
  const ParamLayout& layout_;
  int n_layer_;
  GatherScheduleOptions options_;
  ParamGatherer gatherer_;

  int head_group() const { return layout_.head_group(); }
  int embed_group() const { return layout_.embed_group(); }
};

}  // namespace distllm
