// Refuses a training run that cannot fit this host's memory, before anything large
// is allocated: `distllm plan`'s estimate of what each rank holds (parameters,
// gradients, optimizer state, activations, gathered groups, buffers) against the
// rank's share of the host's memory. A run the allocator would stop with
// std::bad_alloc, or the kernel's OOM killer minutes later, stops here instead with
// what it needs, what the host has, and what to change.
#pragma once

#include <cstdint>

#include "distllm/plan/plan.h"

namespace distllm {

// `limit_bytes`: memory per rank; `ranks_here`: ranks sharing this host (for the message).
// `data_bytes`: the trainer's own buffers (token batches), counted on top of the plan.
void check_run_fits(const plan::PlanInput& input, double limit_bytes, int ranks_here, int64_t data_bytes);

}  // namespace distllm
