#include "distllm/train/hybrid_strategy.h"

#include <algorithm>

#include "distllm/base/error.h"

namespace distllm {

namespace {

ShardingStrategy::Decisions hybrid(const StrategyContext& c) {
  const int n = c.world ? c.world->size() : 1;
  const int hosts = c.world ? c.world->num_hosts() : 1;
  const int given = c.parallel.shard_size;
  const int shard = given > 0 ? given : std::max(1, n / std::max(1, hosts));
  DL_CHECK(n % shard == 0, "hsdp: the shard group size %d does not divide the %d ranks (%s)", shard, n,
           given > 0 ? "--shard-size" : "ranks per host; give --shard-size");
  return {.shard = shard, .full_params = false, .full_grads = false, .separate_reduce_comm = true};
}

}  // namespace

HybridStrategy::HybridStrategy(const StrategyContext& context) : ShardingStrategy(context, hybrid(context)) {}

ReplicatedState HybridStrategy::replicated_state() const {
  return {groups_.replicate_group(), state_->master(), groups_.owned()};
}

}  // namespace distllm
