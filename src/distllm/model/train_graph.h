// Training forward and backward for a fixed (batch, seq) shape, written layer by
// layer (llm.c style, no general autograd). Activations that backward needs are
// kept per layer; everything else is scratch shared across layers.
//
// Distributed strategies plug in through TrainHooks at layer boundaries:
//   before_group_forward(g): about to read group g's parameters (ZeRO-3 gathers here)
//   group_grads_ready(g):    group g's gradients are final for this micro-batch
//                            (DDP all-reduces / ZeRO reduce-scatters here)
// Groups are those of ParamLayout: embed (0), layer i (1 + i), head (n_layer + 1).
// Backward finishes groups in the order head, layer L-1, ..., layer 0, embed.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "distllm/base/aligned_buffer.h"
#include "distllm/kernels/rope.h"
#include "distllm/model/transformer.h"

namespace distllm {

struct TrainHooks {
  std::function<void(int group)> before_group_forward;
  std::function<void(int group)> group_grads_ready;
};

class TrainGraph {
 public:
  TrainGraph(const ModelConfig& config, int batch, int seq_len);

  int batch() const { return B_; }
  int seq_len() const { return T_; }

  // Runs the forward pass on tokens/targets [B, T] and returns the mean
  // cross-entropy over targets that are not -100 (0 if there are none).
  //
  // With compute_grad, also starts the backward pass: the output head's gradient is
  // computed chunk by chunk while its logits are hot in cache (never materialising
  // all [B*T, V] logits), scaled by grad_scale / valid_targets, and accumulated into
  // model.grads(). Call backward() next to finish.
  //
  // logits_out, when given, receives all [B*T, V] logits (tests, evaluation).
  float forward(Transformer& model, const int32_t* tokens, const int32_t* targets, bool compute_grad,
                float grad_scale = 1.0f, float* logits_out = nullptr, const TrainHooks* hooks = nullptr);

  // Accumulates (+=) every parameter's gradient into model.grads().
  void backward(Transformer& model, const TrainHooks* hooks = nullptr);

  int64_t valid_targets() const { return valid_targets_; }
  size_t activation_bytes() const;

 private:
  struct LayerActs {
    AlignedBuffer<float> input;  // residual stream entering the layer [BT, C]
    AlignedBuffer<float> norm1, norm1_mean, norm1_rstd;
    AlignedBuffer<float> qkv;     // [BT, qkv_dim], q and k after rope
    AlignedBuffer<float> attn;    // [BT, attn_dim]
    AlignedBuffer<float> lse;     // [B, H, T]
    AlignedBuffer<float> mid;     // residual after attention [BT, C]
    AlignedBuffer<float> norm2, norm2_mean, norm2_rstd;
    AlignedBuffer<float> mlp_in;  // [BT, mlp_in_dim] (pre-activation)
    AlignedBuffer<float> mlp_act; // [BT, mlp_act_dim]
  };

  ModelConfig cfg_;
  int B_, T_;
  int64_t BT_;
  kernels::RopeTable rope_;
  std::vector<int32_t> positions_;  // [BT]: t for each row
  std::vector<int32_t> tokens_;     // copies kept for the embedding backward
  std::vector<LayerActs> layers_;
  AlignedBuffer<float> final_input_, final_norm_, final_mean_, final_rstd_;
  AlignedBuffer<float> losses_;
  // Scratch for backward and the head.
  AlignedBuffer<float> dresid_, dnorm_, dqkv_, dattn_, dmlp_in_, dmlp_act_, logits_chunk_;
  int64_t valid_targets_ = 0;
  bool grad_pending_ = false;

  void norm_forward(bool first, const LayerTensors& w, const float* in, float* out, float* mean, float* rstd) const;
  void layer_forward(const LayerTensors& w, LayerActs& a, float* out);
  void layer_backward(const LayerTensors& w, const LayerTensors& g, LayerActs& a);
  float head_forward(Transformer& model, const int32_t* targets, bool compute_grad, float grad_scale,
                     float* logits_out);
};

}  // namespace distllm
