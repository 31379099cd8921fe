// ZeRO (Rajbhandari et al.), stages 1 to 3, over every rank of the world: each rank
// owns one slice of the flat buffer (ShardPlan) and keeps the optimizer state of it
// alone (stage 1), also only its gradients (stage 2: buckets are reduce-scattered
// into the owned slice), also only its parameters (stage 3: groups are gathered as
// the graph visits them, GatherSchedule, and the reductions get a communicator of
// their own so gathers never wait behind them).
//
//   stage   parameters   gradients   after the step
//   1       full         full        all-gather the updated slices
//   2       full         slice       all-gather the updated slices
//   3       slice        slice       nothing (the next forward gathers)
#pragma once

#include "distllm/train/sharding_strategy.h"

namespace distllm {

class ZeroStrategy final : public ShardingStrategy {
 public:
  ZeroStrategy(const StrategyContext& context, int stage);

  int stage() const { return stage_; }
  void gather_params_after_step() override;
  // Stages 1 and 2: every rank's full parameters; stage 3 holds nothing twice.
  ReplicatedState replicated_state() const override;

 private:
  int stage_;
};

}  // namespace distllm
