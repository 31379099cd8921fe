#include "distllm/train/zero_strategy.h"

#include "distllm/base/error.h"

namespace distllm {

namespace {

ShardingStrategy::Decisions zero(const StrategyContext& c, int stage) {
  DL_CHECK(stage >= 1 && stage <= 3, "internal error: ZeRO stage %d", stage);
  return {.shard = c.world ? c.world->size() : 1,
          .full_params = stage < 3,
          .full_grads = stage < 2,
          .separate_reduce_comm = stage == 3};
}

}  // namespace

ZeroStrategy::ZeroStrategy(const StrategyContext& context, int stage)
    : ShardingStrategy(context, zero(context, stage)), stage_(stage) {}

void ZeroStrategy::gather_params_after_step() {
  if (stage_ == 3) return;
  if (groups_.plan().ranks() == 1) {
    state_->refresh_working_params();
    return;
  }
  groups_.allgather_params(state_->master(), state_->full_params(), bf16_params(), *context_.tracker);
}

ReplicatedState ZeroStrategy::replicated_state() const {
  if (stage_ == 3) return {};
  return {groups_.world(), state_->full_params(), FlatRange{0, state_->total()}};
}

}  // namespace distllm
