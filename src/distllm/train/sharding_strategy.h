// How data-parallel ranks share one model's flat state: one class per strategy
// behind this interface (parallel_config.h has the table).
//
//   replicated_strategy.h   none, DDP: everything full, gradients all-reduced
//   zero_strategy.h         ZeRO-1/2/3: optimizer state, then gradients, then
//                           parameters sharded over every rank
//   hybrid_strategy.h       HSDP: ZeRO-3 inside a shard group, replicated across
//
// A strategy decides, in its constructor, the groups (shard x replicate), which
// buffers are full and which are the owned slice, whether parameters are gathered
// group by group as the graph visits them, and how gradients are reduced; and, in
// its methods, how the working parameters follow the master after a step and what
// state its replicas must agree on. The mechanisms are shared parts composed here:
// ShardGroups (groups, ownership, buckets, the collectives over them), FlatState
// (buffers), GradReducer (bucketed reduce-scatter / all-reduce), GatherSchedule
// (ZeRO-3's gather / prefetch / release) and a CommTracker that times them all.
// DataParallel (data_parallel.h) puts a strategy together with the model-parallel
// parts (pipeline, tensor parallel, embedding gradients) for the trainer.
#pragma once

#include <memory>

#include "distllm/comm/process_group.h"
#include "distllm/model/config.h"
#include "distllm/model/param_layout.h"
#include "distllm/model/transformer.h"
#include "distllm/train/comm_tracker.h"
#include "distllm/train/flat_state.h"
#include "distllm/train/gather_schedule.h"
#include "distllm/train/grad_reducer.h"
#include "distllm/train/parallel_config.h"
#include "distllm/train/shard_groups.h"

namespace distllm {

// What every strategy is built from (all outlive it).
struct StrategyContext {
  const ModelConfig* config = nullptr;  // the whole model
  const ParamLayout* layout = nullptr;  // of the flat buffers (a tp shard's, a pipeline stage's)
  ParallelConfig parallel;
  comm::ProcessGroupPtr world;  // the data-parallel group (null: one process)
  CommTracker* tracker = nullptr;
};

// State that must be bit-identical on every rank of `group` (check_replicas).
struct ReplicatedState {
  comm::ProcessGroupPtr group;  // null: nothing is replicated
  const float* base = nullptr;  // element range.begin of the flat buffer
  FlatRange range;
};

class ShardingStrategy {
 public:
  // What a strategy's constructor decides; the shared parts are built from it.
  struct Decisions {
    int shard = 1;                      // ranks per shard group
    bool full_params = true;            // else gathered per group (GatherSchedule)
    bool full_grads = true;             // else the owned slice
    bool separate_reduce_comm = false;  // reductions on their own communicator
  };

  // The strategy context.parallel.strategy names.
  static std::unique_ptr<ShardingStrategy> make(const StrategyContext& context);
  // One process training `model` in place (strategy none over its buffers).
  static std::unique_ptr<ShardingStrategy> wrap(const StrategyContext& context, Transformer& model);
  virtual ~ShardingStrategy();
  ShardingStrategy(const ShardingStrategy&) = delete;
  ShardingStrategy& operator=(const ShardingStrategy&) = delete;

  const ShardGroups& groups() const { return groups_; }
  FlatState& state() { return *state_; }
  const FlatState& state() const { return *state_; }
  GradReducer& reducer() { return *reducer_; }
  const GradReducer& reducer() const { return *reducer_; }
  // Present when parameters are sharded and gathered per group (ZeRO-3, HSDP).
  GatherSchedule* gather_schedule() { return schedule_.get(); }
  const GatherSchedule* gather_schedule() const { return schedule_.get(); }

  // Group g's parameters for the graph: in the full buffer, or gathered.
  float* group_params(int group);
  // Makes every copy of every parameter equal to its owner's (DDP: rank 0's):
  // replicas take the first replica's master slice, then the working copies follow.
  void sync_parameters();

  // ---- what differs between strategies ----
  // After AdamW updated the master slice: the working parameters follow it.
  virtual void gather_params_after_step() = 0;
  // What this strategy's ranks hold identical copies of (debug check).
  virtual ReplicatedState replicated_state() const = 0;

 protected:
  ShardingStrategy(const StrategyContext& context, const Decisions& decisions);
  ShardingStrategy(const StrategyContext& context, Transformer& model);

  const StrategyContext context_;
  ShardGroups groups_;
  std::unique_ptr<FlatState> state_;
  std::unique_ptr<GradReducer> reducer_;
  std::unique_ptr<GatherSchedule> schedule_;

  bool bf16_params() const { return context_.parallel.mixed_precision == MixedPrecision::kBf16; }
  bool bf16_grads() const { return context_.parallel.mixed_precision != MixedPrecision::kFp32; }
};

}  // namespace distllm
