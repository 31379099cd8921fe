// Hybrid sharded data parallelism (HSDP, FSDP's hybrid shard): ZeRO-3 inside a
// shard group of S ranks (by default the ranks of one host, so gathers and
// reduce-scatters stay on shared memory), replicated across the R = world / S
// groups, whose gradient slices are all-reduced after the reduce-scatter
// (GradReducer). Only the slice's R copies cross hosts.
#pragma once

#include "distllm/train/sharding_strategy.h"

namespace distllm {

class HybridStrategy final : public ShardingStrategy {
 public:
  explicit HybridStrategy(const StrategyContext& context);

  // Parameters are gathered by the next forward.
  void gather_params_after_step() override {}
  // The master slice, among its replicas.
  ReplicatedState replicated_state() const override;
};

}  // namespace distllm
