#include "distllm/train/sharding_strategy.h"

#include "distllm/base/error.h"
#include "distllm/train/hybrid_strategy.h"
#include "distllm/train/replicated_strategy.h"
#include "distllm/train/zero_strategy.h"

namespace distllm {

std::unique_ptr<ShardingStrategy> ShardingStrategy::make(const StrategyContext& context) {
  switch (context.parallel.strategy) {
    case Strategy::kNone:
    case Strategy::kDdp: return std::make_unique<ReplicatedStrategy>(context);
    case Strategy::kZero1: return std::make_unique<ZeroStrategy>(context, 1);
    case Strategy::kZero2: return std::make_unique<ZeroStrategy>(context, 2);
    case Strategy::kZero3: return std::make_unique<ZeroStrategy>(context, 3);
    case Strategy::kHsdp: return std::make_unique<HybridStrategy>(context);
  }
  throw_error("internal error: unknown strategy");
}

std::unique_ptr<ShardingStrategy> ShardingStrategy::wrap(const StrategyContext& context, Transformer& model) {
  return std::make_unique<ReplicatedStrategy>(context, model);
}

ShardingStrategy::ShardingStrategy(const StrategyContext& context, const Decisions& d)
    : context_(context),
      groups_(*context.layout, context.parallel, context.world, d.shard, d.separate_reduce_comm) {
  const ShardPlan& plan = groups_.plan();
  state_ = std::make_unique<FlatState>(
      *context_.layout, groups_.owned(),
      FlatStateSpec{.full_params = d.full_params, .full_grads = d.full_grads, .bf16_params = bf16_params(),
                    .one_shard = plan.ranks() == 1});
  GradReducerSetup r;
  r.layout = context_.layout;
  r.plan = plan;
  r.shard_rank = groups_.shard_rank();
  r.shard_group = plan.ranks() > 1 ? groups_.reduce_group() : nullptr;
  r.replicate_group = groups_.replicate_group();
  r.buckets = groups_.buckets();
  r.bf16 = bf16_grads();
  r.full_grads = state_->full_grads();
  r.shard_grads = state_->full_grads() ? nullptr : state_->shard_grads();
  r.tracker = context_.tracker;
  reducer_ = std::make_unique<GradReducer>(std::move(r));
  if (!d.full_params) {
    ParamGathererSetup g;
    g.layout = context_.layout;
    g.plan = plan;
    g.shard_rank = groups_.shard_rank();
    g.shard_group = plan.ranks() > 1 ? groups_.shard_group() : nullptr;
    g.bf16 = bf16_params();
    // A rank may own nothing (more ranks than aligned chunks): give it a valid pointer.
    static float empty_shard[1] = {0};
    g.master = state_->master() ? state_->master() : empty_shard;
    g.tracker = context_.tracker;
    const ParallelConfig& pc = context_.parallel;
    schedule_ = std::make_unique<GatherSchedule>(
        *context_.layout, context_.config->n_layer,
        GatherScheduleOptions{.prefetch = pc.prefetch, .reshard_after_forward = pc.reshard_after_forward},
        std::move(g));
  }
}

ShardingStrategy::ShardingStrategy(const StrategyContext& context, Transformer& model)
    : context_(context), groups_(*context.layout, context.parallel) {
  state_ = std::make_unique<FlatState>(model);
  GradReducerSetup r;
  r.layout = context_.layout;
  r.plan = groups_.plan();
  r.buckets = groups_.buckets();
  r.full_grads = state_->full_grads();
  r.tracker = context_.tracker;
  reducer_ = std::make_unique<GradReducer>(std::move(r));
}

ShardingStrategy::~ShardingStrategy() = default;

float* ShardingStrategy::group_params(int g) {
  if (float* full = state_->full_params()) return full + context_.layout->groups().at(static_cast<size_t>(g)).offset;
  return schedule_->acquire(g);
}

void ShardingStrategy::sync_parameters() {
  groups_.broadcast_from_first_replica(state_->master(), *context_.tracker);
  if (state_->full_params()) gather_params_after_step();
}

}  // namespace distllm
