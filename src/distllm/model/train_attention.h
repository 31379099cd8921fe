// The attention of a training block, between its q|k|v projection and its output
// projection: rotary positions on q and k (for families that use them), causal
// attention over this rank's sequences — or ring attention over the context-
// parallel group (ring_attention.h) — and the backward of both. Under tensor
// parallelism with fewer key/value heads than ranks, each key/value head is held
// by several ranks whose gradient parts are summed here.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "distllm/base/aligned_buffer.h"
#include "distllm/kernels/attention.h"
#include "distllm/kernels/rope.h"
#include "distllm/model/parallel_layers.h"
#include "distllm/model/ring_attention.h"

namespace distllm {

class TrainAttention {
 public:
  // `shard`: this rank's heads; B sequences of which this rank holds T tokens each
  // (the whole seq_len, or its context-parallel part) at `positions` [B*T].
  TrainAttention(const ModelConfig& shard, int B, int T, int seq_len, const TensorParallel& tp,
                 const ContextParallel& cp, const int32_t* positions);

  // qkv [B*T, qkv_dim]: q and k are rotated in place; writes out [B*T, attn_dim]
  // and the log-sum-exp [B, n_head, T] that backward needs.
  void forward(float* qkv, float* out, float* lse);
  // dout [B*T, attn_dim] -> dqkv [B*T, qkv_dim] (overwritten): the gradient of the
  // q|k|v projection's output, before rotation.
  void backward(const float* qkv, const float* out, const float* lse, const float* dout, float* dqkv);
  // After the projection's weight gradient used dqkv: a replicated key/value head's
  // input gradient comes from one of its ranks only (the others' is zeroed here and
  // arrives by the input gradient's all-reduce).
  void drop_replicated_kv_input_grad(float* dqkv) const;

  size_t buffer_bytes() const;

 private:
  ModelConfig cfg_;
  int B_, T_;
  int64_t BT_;
  TensorParallel tp_;
  const int32_t* positions_;
  bool rotary_;
  kernels::RopeTable rope_;
  std::unique_ptr<RingAttention> ring_;  // context parallel
  AlignedBuffer<float> kv_sum_;          // replicated key/value heads: [BT, 2 * n_kv_head(all) * D]

  kernels::AttentionArgs args(const float* qkv, float* out, float* lse) const;
  void sum_replicated_kv_grads(float* dk, float* dv);
};

}  // namespace distllm
