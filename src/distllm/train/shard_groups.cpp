#include "distllm/train/shard_groups.h"

#include <algorithm>

#include "distllm/base/aligned_buffer.h"
#include "distllm/base/error.h"
#include "distllm/comm/device_mesh.h"
#include "distllm/train/bf16_buffer.h"
#include "distllm/train/flat_copy.h"

namespace distllm {

namespace {

constexpr comm::CallOptions kAsync{.async_op = true};

int64_t mib_to_floats(double mib) { return std::max<int64_t>(1, static_cast<int64_t>(mib * (1 << 20) / 4)); }

}  // namespace

ShardGroups::ShardGroups(const ParamLayout& layout, const ParallelConfig& parallel) { make_plan(layout, parallel, 1); }

ShardGroups::ShardGroups(const ParamLayout& layout, const ParallelConfig& parallel, comm::ProcessGroupPtr world,
                         int shard, bool separate_reduce_comm)
    : world_(std::move(world)) {
  const int n = world_size();
  DL_CHECK(shard >= 1 && n % shard == 0, "internal error: a shard group of %d ranks in a world of %d", shard, n);
  const int replicas = n / shard;
  if (n > 1) {
    if (shard == 1) {
      replicate_group_ = world_;
    } else if (replicas == 1) {
      shard_group_ = world_;
    } else {
      // Replicas outermost, shards innermost: shard peers are consecutive ranks,
      // which launchers place on one host (shared memory); replicas cross hosts.
      comm::DeviceMesh mesh(world_, {{"replicate", replicas}, {"shard", shard}});
      shard_group_ = mesh.group("shard");
      replicate_group_ = mesh.group("replicate");
    }
  }
  shard_rank_ = shard_group_ ? shard_group_->rank() : 0;
  reduce_group_ = shard_group_;
  if (shard_group_ && separate_reduce_comm) reduce_group_ = shard_group_->split(0, shard_rank_);
  make_plan(layout, parallel, shard);
}

void ShardGroups::make_plan(const ParamLayout& layout, const ParallelConfig& parallel, int shard) {
  plan_ = ShardPlan(layout.total_size(), shard);
  owned_ = plan_.owned(shard_rank_);
  buckets_ = make_buckets(layout, mib_to_floats(parallel.bucket_mb), mib_to_floats(parallel.first_bucket_mb));
}

FlatRange ShardGroups::replica_part() const {
  const FlatRange part = ShardPlan(owned_.size(), replicas()).owned(replica_rank());
  return {owned_.begin + part.begin, owned_.begin + part.end};
}

void ShardGroups::gather_range(const float* owned_state, FlatRange range, float* out, CommTracker& tracker) const {
  if (plan_.ranks() == 1) {
    copy_floats(out, owned_state + (range.begin - owned_.begin), range.size());
    return;
  }
  const FlatRange part = owned_.intersect(range);
  float* mine = out + plan_.offset_in(shard_rank_, range);
  if (!part.empty()) copy_floats(mine, owned_state + (part.begin - owned_.begin), part.size());
  tracker.blocking(range.size() * 4, [&] {
    shard_group_->allgatherv(mine, out, plan_.counts(range), comm::DType::kF32);
  });
}

void ShardGroups::gather_all(const float* owned_state, float* out, CommTracker& tracker) const {
  if (plan_.ranks() == 1) {
    copy_floats(out, owned_state, plan_.total());
    return;
  }
  for (const Bucket& b : buckets_) gather_range(owned_state, b.range, out + b.range.begin, tracker);
}

void ShardGroups::allgather_params(const float* master, float* full_params, bool bf16, CommTracker& tracker) const {
  if (!bf16) {
    std::vector<comm::WorkPtr> works;
    for (const Bucket& b : buckets_) {
      float* out = full_params + b.range.begin;
      auto w = shard_group_->allgatherv(out + plan_.offset_in(shard_rank_, b.range), out, plan_.counts(b.range),
                                        comm::DType::kF32, kAsync);
      tracker.issued(w, b.range.size() * 4);
      works.push_back(std::move(w));
    }
    for (auto& w : works) tracker.wait(w);
    return;
  }
  AlignedBuffer<uint16_t> in, out;
  for (const Bucket& b : buckets_) {
    const FlatRange part = owned_.intersect(b.range);
    in.resize_uninitialized(static_cast<size_t>(std::max<int64_t>(1, part.size())));
    out.resize_uninitialized(static_cast<size_t>(b.range.size()));
    if (!part.empty()) f32_to_bf16_buffer(master + (part.begin - owned_.begin), in.data(), part.size());
    tracker.blocking(b.range.size() * 2, [&] {
      shard_group_->allgatherv(in.data(), out.data(), plan_.counts(b.range), comm::DType::kBF16);
    });
    bf16_to_f32_buffer(out.data(), full_params + b.range.begin, b.range.size());
  }
}

void ShardGroups::broadcast_from_first_replica(float* owned_state, CommTracker& tracker) const {
  if (replicas() == 1 || owned_.size() == 0) return;
  tracker.blocking(owned_.size() * 4, [&] {
    replicate_group_->broadcast(owned_state, static_cast<size_t>(owned_.size()), comm::DType::kF32, 0);
  });
}

}  // namespace distllm
