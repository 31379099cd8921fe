// Replicated training (strategy none for one process, DDP for several): every rank
// holds the full parameters, gradients and optimizer state; a step all-reduces the
// gradients bucket by bucket during backward (GradReducer over the replicate group,
// which is the whole world), so every rank takes the same AdamW step on the same
// sums and the replicas stay bit-identical without gathering anything.
#pragma once

#include "distllm/train/sharding_strategy.h"

namespace distllm {

class ReplicatedStrategy final : public ShardingStrategy {
 public:
  explicit ReplicatedStrategy(const StrategyContext& context);
  // One process training `model` in place.
  ReplicatedStrategy(const StrategyContext& context, Transformer& model);

  // The master is the working copy (or, with bf16 parameters, rounds into it).
  void gather_params_after_step() override;
  // Every rank's full parameters.
  ReplicatedState replicated_state() const override;
};

}  // namespace distllm
