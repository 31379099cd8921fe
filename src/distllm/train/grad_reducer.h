// Bucketed gradient reduction for data-parallel training (composed by ShardingStrategy).
//
// When the last group of a bucket has its gradients (TrainHooks::group_grads_ready)
// the bucket's reduction starts asynchronously while backward goes on:
//   1. across the shard group (ZeRO, S > 1): reduce-scatter, in place, leaving the
//      sum of this rank's owned part of the bucket (ShardPlan) where it was;
//   2. across the replicate group (DDP, HSDP; R > 1): all-reduce of that owned part
//      (for DDP the whole bucket), issued once step 1 has finished.
// finish() waits for every bucket. Gradients live either in the caller's full
// buffer (DDP, ZeRO-1: the reduced owned part is left in place) or in bucket
// buffers that exist only from the bucket's first gradient until its reduction is
// done, when the owned part is added to the caller's gradient shard (ZeRO-2/3).
// With bf16 communication the bucket is converted to bf16 first and the reduced
// owned part back to f32. At most kMaxInFlight buckets are being reduced at once (a
// new one first waits for the oldest), which bounds the bucket memory whatever the
// timing: the bucket being filled, kMaxInFlight in flight, and a tied embedding's
// bucket (filled from the head's forward on).
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "distllm/base/aligned_buffer.h"
#include "distllm/comm/process_group.h"
#include "distllm/model/param_layout.h"
#include "distllm/train/comm_tracker.h"
#include "distllm/train/shard_plan.h"

namespace distllm {

struct GradReducerSetup {
  const ParamLayout* layout = nullptr;
  ShardPlan plan;
  int shard_rank = 0;
  comm::ProcessGroupPtr shard_group;      // null when the plan has one rank
  comm::ProcessGroupPtr replicate_group;  // null or size 1: no replicas
  std::vector<Bucket> buckets;
  bool bf16 = false;
  float* full_grads = nullptr;   // gradients in one full flat buffer, or
  float* shard_grads = nullptr;  // the owned shard that reduced buckets are added to
  CommTracker* tracker = nullptr;
};

class GradReducer {
 public:
  static constexpr size_t kMaxInFlight = 2;

  explicit GradReducer(GradReducerSetup setup);
  ~GradReducer();

  // Where group g's gradients accumulate during this micro-step.
  float* group_grads(int group);
  // Group g's gradients are complete; starts its bucket's reduction when the bucket is.
  void group_ready(int group);
  // Starts the reduction of the bucket holding `group` now (its gradients are final
  // earlier than the graph reports), or marks it reduced without communicating
  // (its gradients are known to be zero everywhere). Later group_ready calls for it
  // do nothing.
  void launch_bucket_of(int group);
  void skip_bucket_of(int group);
  // Starts every bucket not started in this micro-step whose gradients may be
  // nonzero: all of them with a full gradient buffer, those with a bucket buffer
  // otherwise (the rest are marked reduced). For a micro-step that computed only
  // some of the groups: a pipeline stage's chunk (a later chunk's output head also
  // adds to its gradients in forward).
  void launch_remaining();
  // Moves finished reductions along without blocking.
  void poll();
  // Waits for every started reduction (all buckets must have been started).
  void finish();
  // Bytes of bucket and staging buffers alive now, and at most so far.
  int64_t live_bytes() const { return live_bytes_; }
  int64_t peak_bytes() const { return peak_bytes_; }

 private:
  struct InFlight {
    int bucket = 0;
    comm::WorkPtr scatter, replicate;
    bool replicate_issued = false;
  };
  struct BucketState {
    AlignedBuffer<float> grads;     // sharded-gradient mode
    AlignedBuffer<uint16_t> bf16;   // bf16 communication staging
    bool launched = false;          // in this micro-step
  };

  GradReducerSetup s_;
  FlatRange owned_;
  std::vector<int> bucket_of_group_;
  std::vector<BucketState> state_;
  std::deque<InFlight> inflight_;
  int64_t live_bytes_ = 0, peak_bytes_ = 0;

  float* bucket_data(int b);
  void launch(int b);
  void issue_replicate(InFlight& f);
  void complete(InFlight& f);
  void complete_front();  // waits for the oldest reduction and finishes it
  void track(int64_t delta);
};

}  // namespace distllm
