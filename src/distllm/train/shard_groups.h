// Which data-parallel ranks share what: the world arranged as replicate x shard
// (parallel_config.h). The S ranks of a shard group split the flat buffer by
// ShardPlan, each owning one slice; the R replicas of a shard hold the same slice
// and all-reduce its gradients. DDP is S = 1, ZeRO is R = 1, HSDP is both. A
// sharding strategy (sharding_strategy.h) picks S; this part builds the groups, the
// owned range and the gradient buckets, and runs the collectives that move a flat
// state between the owned slices and a whole (unsharded) buffer.
//
// Every function here is collective over the group it names, and every rank calls
// them in the same order (the training step's fixed order), which keeps the ranks'
// collectives matched.
#pragma once

#include <cstdint>
#include <vector>

#include "distllm/comm/process_group.h"
#include "distllm/model/param_layout.h"
#include "distllm/train/comm_tracker.h"
#include "distllm/train/parallel_config.h"
#include "distllm/train/shard_plan.h"

namespace distllm {

class ShardGroups {
 public:
  // One process (or a model trained in place): one shard, no replicas.
  ShardGroups(const ParamLayout& layout, const ParallelConfig& parallel);
  // `world` (null: one process) as replicate x shard with `shard` ranks per shard
  // group (it divides the world). With `separate_reduce_comm` the gradient
  // reductions get a communicator of their own (and its thread), so a parameter
  // gather never queues behind a reduce-scatter (FSDP's two streams).
  ShardGroups(const ParamLayout& layout, const ParallelConfig& parallel, comm::ProcessGroupPtr world, int shard,
              bool separate_reduce_comm);

  const comm::ProcessGroupPtr& world() const { return world_; }
  const comm::ProcessGroupPtr& shard_group() const { return shard_group_; }    // null: one shard
  const comm::ProcessGroupPtr& reduce_group() const { return reduce_group_; }  // shard group's reductions
  const comm::ProcessGroupPtr& replicate_group() const { return replicate_group_; }  // null: no replicas
  int world_size() const { return world_ ? world_->size() : 1; }
  int shard_rank() const { return shard_rank_; }
  int replicas() const { return replicate_group_ ? replicate_group_->size() : 1; }
  int replica_rank() const { return replicate_group_ ? replicate_group_->rank() : 0; }
  const ShardPlan& plan() const { return plan_; }
  FlatRange owned() const { return owned_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }

  // The part of the owned slice this rank writes to a checkpoint: replica k writes
  // the k-th part of it, so each element is written once.
  FlatRange replica_part() const;

  // ---- collectives over the shard group (local copies when it has one rank) ----
  // One range of the flat buffer assembled from every rank's owned slice of
  // `owned_state` (a state of the owned range); `out` receives range.size() floats.
  void gather_range(const float* owned_state, FlatRange range, float* out, CommTracker& tracker) const;
  // The whole flat buffer, bucket by bucket.
  void gather_all(const float* owned_state, float* out, CommTracker& tracker) const;
  // The full working parameters from every rank's master slice after a step: in
  // place in f32 (each rank's part is already where the full buffer keeps it), or
  // converted to bf16 and widened on arrival.
  void allgather_params(const float* master, float* full_params, bool bf16, CommTracker& tracker) const;
  // Over the replicate group: every replica's `owned_state` becomes the first's.
  void broadcast_from_first_replica(float* owned_state, CommTracker& tracker) const;

 private:
  comm::ProcessGroupPtr world_, shard_group_, reduce_group_, replicate_group_;
  ShardPlan plan_;
  int shard_rank_ = 0;
  FlatRange owned_;
  std::vector<Bucket> buckets_;

  void make_plan(const ParamLayout& layout, const ParallelConfig& parallel, int shard);
};

}  // namespace distllm
