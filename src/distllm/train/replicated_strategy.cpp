#include "distllm/train/replicated_strategy.h"

#include "distllm/base/error.h"

namespace distllm {

namespace {

// Everything full: each rank is a shard group of its own, the world its replicas.
ShardingStrategy::Decisions replicated(const StrategyContext& c) {
  const int n = c.world ? c.world->size() : 1;
  DL_CHECK(c.parallel.strategy != Strategy::kNone || n == 1,
           "%d ranks were started but --strategy is none: pick ddp, zero1, zero2, zero3 or hsdp", n);
  return {.shard = 1};
}

}  // namespace

ReplicatedStrategy::ReplicatedStrategy(const StrategyContext& context)
    : ShardingStrategy(context, replicated(context)) {}

ReplicatedStrategy::ReplicatedStrategy(const StrategyContext& context, Transformer& model)
    : ShardingStrategy(context, model) {}

void ReplicatedStrategy::gather_params_after_step() { state_->refresh_working_params(); }

ReplicatedState ReplicatedStrategy::replicated_state() const {
  return {groups_.world(), state_->full_params(), FlatRange{0, state_->total()}};
}

}  // namespace distllm
