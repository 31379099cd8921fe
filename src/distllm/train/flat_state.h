// The flat training state one data-parallel rank holds (DESIGN.md principle 3):
// working parameters, f32 master parameters and gradients, each either the full
// flat buffer or the slice this rank owns (ShardGroups::owned), as its sharding
// strategy decides. The optimizer's moments are the AdamW object's (optimizer.h).
//
//   full params   the working copy every forward reads (none, DDP, ZeRO-1/2); under
//                 ZeRO-3/HSDP groups are gathered on demand instead (gather_schedule.h)
//   master        the owned f32 slice AdamW updates: a view of the full parameters,
//                 or a buffer of its own when parameters are sharded or kept in bf16
//   grads         the full buffer (none, DDP, ZeRO-1: reduced in place) or the owned
//                 slice that reduced buckets are added to (ZeRO-2/3, HSDP)
#pragma once

#include <cstdint>

#include "distllm/base/aligned_buffer.h"
#include "distllm/model/param_layout.h"
#include "distllm/model/transformer.h"
#include "distllm/train/shard_plan.h"

namespace distllm {

struct FlatStateSpec {
  bool full_params = true;  // a full working copy of the parameters
  bool full_grads = true;   // gradients in a full buffer (else the owned slice)
  bool bf16_params = false;  // working parameters are the bf16-rounded master
  bool one_shard = true;     // the owned slice is the whole buffer
};

class FlatState {
 public:
  // Zero-filled buffers of `layout` for a rank owning `owned`.
  FlatState(const ParamLayout& layout, FlatRange owned, FlatStateSpec spec);
  // One process training `model` in place: its buffers, unsharded, f32.
  explicit FlatState(Transformer& model);
  FlatState(const FlatState&) = delete;
  FlatState& operator=(const FlatState&) = delete;

  FlatRange owned() const { return owned_; }
  int64_t total() const { return total_; }
  float* full_params() const { return full_params_; }  // null when parameters are sharded
  float* full_grads() const { return full_grads_; }    // null when gradients are sharded
  float* master() const { return master_; }           // the owned slice (may alias full_params)
  float* shard_grads() const { return shard_grads_; }  // the owned slice (may alias full_grads)
  bool separate_master() const { return !full_params_ || master_ != full_params_ + owned_.begin; }

  // Initial weights as Transformer::init_weights(seed) draws them: the full copy on
  // every rank (a pure function of the seed), or just the owned slice.
  void init_weights(const ParamLayout& layout, uint64_t seed);
  // Every rank's copy of the whole flat buffer of the layout: keeps what it holds.
  void load(const float* flat);
  // bf16 parameters on one shard: the working copy is the rounded master (f32
  // storage, since the kernels compute in f32). With several shards the all-gather
  // after each step delivers rounded values instead.
  void refresh_working_params();
  // Zeroes the gradients (full buffer or owned slice) at the start of a step.
  void zero_grads();

  // Bytes of each buffer (MemoryBreakdown); a wrapped model's count too.
  int64_t params_bytes() const { return full_params_ ? total_ * 4 : 0; }
  int64_t master_bytes() const { return static_cast<int64_t>(master_buf_.size() * 4); }
  int64_t grads_bytes() const { return full_grads_ ? total_ * 4 : static_cast<int64_t>(shard_grads_buf_.size() * 4); }

 private:
  FlatRange owned_;
  int64_t total_ = 0;
  FlatStateSpec spec_;
  AlignedBuffer<float> own_params_, own_grads_, master_buf_, shard_grads_buf_;
  float* full_params_ = nullptr;
  float* full_grads_ = nullptr;
  float* master_ = nullptr;
  float* shard_grads_ = nullptr;
};

}  // namespace distllm
