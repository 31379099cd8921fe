// A pipeline's tied embedding (as Megatron-LM keeps it): with the output head tied
// to the token table, the last stage holds a copy of the table next to the head.
// Both copies must take the same update, so before the optimizer step the first
// and the last stage swap their (data-parallel reduced) gradients of the table and
// each adds the two. The stages lay the table out at different flat offsets, so
// under a sharded strategy their slices cover different rows: each assembles the
// whole table's gradient from its shard group's slices first. The gradient norm
// counts the first stage's copy only (DataParallel's norm weights).
#pragma once

#include "distllm/model/param_layout.h"
#include "distllm/train/comm_tracker.h"
#include "distllm/train/pipeline_stage.h"
#include "distllm/train/shard_groups.h"

namespace distllm {

// Collective over the pp group's first and last stage and their shard groups; a
// no-op for a stage that holds no copy or a model whose head is not tied.
// `shard_grads` is this rank's reduced gradient slice (groups.owned()).
void sum_tied_embedding_grads(const ParamLayout& layout, const PipelineStage& pipeline, const ShardGroups& groups,
                              float* shard_grads, CommTracker& tracker);

}  // namespace distllm
