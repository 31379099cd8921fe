// The training graph's output: the final norm, the LM head and the cross-entropy.
//
// With gradients the head's backward runs inside forward, chunk by chunk while a
// chunk's logits are in cache, so the [B*T, V] logits are never materialised whole
// and the [V, C] gradient is read and written only a few times per step; the final
// norm's backward waits for backward(). Under tensor parallelism each rank holds a
// slice of the vocabulary, and the cross-entropy combines every rank's part of each
// row's log-sum-exp (vocab_parallel_cross_entropy). With final-logit soft-capping
// (Gemma 2) the logits are capped by their own elementwise pass before the
// cross-entropy and its gradient passed back through the tanh after it, so the
// cross-entropy kernels (plain and vocabulary-parallel) stay as they are.
#pragma once

#include <cstdint>

#include "distllm/base/aligned_buffer.h"
#include "distllm/kernels/matmul.h"
#include "distllm/model/param_layout.h"
#include "distllm/model/parallel_layers.h"
#include "distllm/model/train_block.h"

namespace distllm {

struct HeadLossArgs {
  bool compute_grad = false;
  float grad_scale = 1.0f;
  int64_t loss_normalizer = 0;  // 0: this batch's count of valid targets
  float* logits_out = nullptr;  // receives all [B*T, V] logits
};

class TrainHead {
 public:
  // `shard`: this rank's vocabulary rows; `vocab`: the whole vocabulary (the chunks
  // follow it, so every tp rank runs the same chunks).
  TrainHead(const ModelConfig& shard, int vocab, int64_t BT, ParallelLayers& par, const TensorParallel& tp,
            BlockScratch& scratch);

  void set_compute_dtype(kernels::ComputeDtype d) { compute_ = d; }
  // The summed cross-entropy over valid targets divided by the normalizer. With
  // gradients, dhead's LM head accumulates its gradient and d(final norm output)
  // is kept for backward. `final_input`: this rank's rows of the residual stream.
  float forward(const HeadTensors& head, const HeadTensors& dhead, const float* final_input, const int32_t* targets,
                const HeadLossArgs& args);
  // The final norm's backward: writes d(final_input) into dresid (this rank's rows).
  void backward(const HeadTensors& head, const HeadTensors& dhead, const float* final_input, float* dresid);

  int64_t valid_targets() const { return valid_targets_; }
  size_t bytes() const;

 private:
  ModelConfig cfg_;
  int vocab_;
  int64_t BT_;
  ParallelLayers& par_;
  TensorParallel tp_;
  BlockScratch& s_;
  kernels::ComputeDtype compute_ = kernels::ComputeDtype::kF32;
  AlignedBuffer<float> final_norm_, final_mean_, final_rstd_, losses_, logits_chunk_;
  AlignedBuffer<float> capped_chunk_;  // soft-capping with gradients: the chunk's capped logits
  const float* final_dnorm_ = nullptr;  // d(final norm output), this rank's rows
  int64_t valid_targets_ = 0;
};

}  // namespace distllm
