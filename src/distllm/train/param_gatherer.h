// Parameter groups gathered from their shards on demand (ZeRO-3 / FSDP full shard;
// scheduled by GatherSchedule).
//
// Each rank holds the master f32 shard it owns (ShardPlan). Before a group is used
// its parameters are all-gathered into a buffer of the group's full size (in bf16
// and widened when parameters are communicated in bf16), and freed when released.
// Gathers run asynchronously on the shard group's communication thread, so the
// next group's gather (a prefetch) proceeds while the current one computes; every
// rank issues them in the same order because the training graph visits groups in
// a fixed order.
#pragma once

#include <cstdint>
#include <vector>

#include "distllm/base/aligned_buffer.h"
#include "distllm/comm/process_group.h"
#include "distllm/model/param_layout.h"
#include "distllm/train/comm_tracker.h"
#include "distllm/train/shard_plan.h"

namespace distllm {

struct ParamGathererSetup {
  const ParamLayout* layout = nullptr;
  ShardPlan plan;
  int shard_rank = 0;
  comm::ProcessGroupPtr shard_group;  // null when the plan has one rank
  bool bf16 = false;
  const float* master = nullptr;  // this rank's owned shard
  CommTracker* tracker = nullptr;
};

class ParamGatherer {
 public:
  explicit ParamGatherer(ParamGathererSetup setup);
  ~ParamGatherer();

  // Starts gathering group g unless it is held or on its way.
  void prefetch(int group);
  // Group g's full parameters, gathering (and waiting) if needed.
  float* acquire(int group);
  bool held(int group) const { return slots_.at(static_cast<size_t>(group)).state != State::kFree; }
  // Frees group g's buffer (no-op if it is not held).
  void release(int group);
  void release_all();

  int64_t live_bytes() const { return live_bytes_; }
  int64_t peak_bytes() const { return peak_bytes_; }
  void reset_peak() { peak_bytes_ = live_bytes_; }
  int64_t gathers() const { return gathers_; }

 private:
  enum class State { kFree, kGathering, kReady };
  struct Slot {
    State state = State::kFree;
    AlignedBuffer<float> params;
    AlignedBuffer<uint16_t> bf16_in, bf16_out;
    comm::WorkPtr work;
  };
  ParamGathererSetup s_;
  FlatRange owned_;
  std::vector<Slot> slots_;
  int64_t live_bytes_ = 0, peak_bytes_ = 0, gathers_ = 0;

  void track(int64_t delta);
  static int64_t bytes_of(const Slot& s);
};

}  // namespace distllm
