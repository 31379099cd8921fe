// The attention of a training block, between its q|k|v projection and its output
// projection: the per-head q/k norms (for families that have them), rotary
// positions on q and k (for families that use them), causal attention (windowed
// and soft-capped where the layer is: ModelConfig::layer_attention) over this rank's
// sequences — or ring attention over the context-
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

// A block's q/k norms (block_spec.h: qk_norm): the weights [head_dim], and where the
// layer keeps the pre-norm q|k [BT, H + KV, D] and their reciprocal RMS for backward.
struct QkNorm {
  const float* q_weight = nullptr;
  const float* k_weight = nullptr;
  float* saved = nullptr;
  float* rstd = nullptr;
};

class TrainAttention {
 public:
  // `shard`: this rank's heads; B sequences of which this rank holds T tokens each
  // (the whole seq_len, or its context-parallel part) at `positions` [B*T].
  TrainAttention(const ModelConfig& shard, int B, int T, int seq_len, const TensorParallel& tp,
                 const ContextParallel& cp, const int32_t* positions);

  // qkv [B*T, qkv_dim]: q and k are normed (qk_norm) and rotated in place; writes
  // out [B*T, attn_dim] and the log-sum-exp [B, n_head, T] that backward needs.
  // `layer` says which attention it is (ModelConfig::layer_attention: window,
  // soft-cap, scale, RoPE table).
  void forward(int layer, float* qkv, float* out, float* lse, const QkNorm& norm = {});
  // dout [B*T, attn_dim] -> dqkv [B*T, qkv_dim] (overwritten): the gradient of the
  // q|k|v projection's output, before the norms and the rotation; the norms'
  // weight gradients are added to dq_norm and dk_norm.
  void backward(int layer, const float* qkv, const float* out, const float* lse, const float* dout, float* dqkv,
                const QkNorm& norm = {}, float* dq_norm = nullptr, float* dk_norm = nullptr);
  // Floats of QkNorm::saved and ::rstd a layer keeps (0 without q/k norms).
  int64_t qk_saved_floats() const;
  int64_t qk_rstd_floats() const;
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
  kernels::RopeTable local_rope_;  // windowed layers with their own RoPE base (rope_local_theta)
  std::unique_ptr<RingAttention> ring_;  // context parallel
  AlignedBuffer<float> kv_sum_;          // replicated key/value heads: [BT, 2 * n_kv_head(all) * D]
  AlignedBuffer<float> norm_grads_;      // tp with q/k norms: one micro-step's q|k norm gradients [2D]

  kernels::AttentionArgs args(int layer, const float* qkv, float* out, float* lse) const;
  const kernels::RopeTable& rope_of(int layer) const;
  void sum_replicated_kv_grads(float* dk, float* dv);
  void qk_norm_backward(float* dqkv, const QkNorm& norm, float* dq_norm, float* dk_norm);
};

}  // namespace distllm
