// Debug check (--check-replicas) that data-parallel replicas have not diverged:
// every rank hashes each tensor's part of the replicated state, the hashes are
// all-gathered, and every rank throws the same error naming the first tensor and
// the two ranks that differ. Silent divergence (a non-deterministic reduction, a
// missed broadcast) otherwise shows up only as a slowly worse loss.
#pragma once

#include <cstdint>

#include "distllm/model/param_layout.h"
#include "distllm/train/sharding_strategy.h"

namespace distllm {

// Collective over state.group (nothing to compare without one). `step` is named
// in the error.
void check_replicas(const ReplicatedState& state, const ParamLayout& layout, int64_t step);

}  // namespace distllm
