// One decoder block's training forward and backward, read top to bottom as llm.c
// writes them:
//   mid = in  + attn_out(attention(qkv(norm1(in))))   (q/k normed per head first, for families that do)
//   out = mid + mlp_out(act(mlp_in(norm2(mid))))
// With sandwich norms (post_norms) each branch's output is normed once more before
// its residual add: mid = in + post1(attn_out(...)), out = mid + post2(mlp_out(...)).
// The norms, the activation and the positions are the family's (block_spec.h); the
// linears and norms are parallel layers (parallel_layers.h) and the attention a
// TrainAttention, so tensor, sequence and context parallelism wrap the block
// instead of branching inside it.
#pragma once

#include <cstdint>

#include "distllm/base/aligned_buffer.h"
#include "distllm/kernels/matmul.h"
#include "distllm/model/param_layout.h"
#include "distllm/model/parallel_layers.h"
#include "distllm/model/train_attention.h"

namespace distllm {

// What a block's backward needs of its forward (one set per layer, or one shared
// set recomputed for checkpointed layers). Widths are the shard's; norm statistics
// are kept for this rank's rows only.
struct BlockActs {
  AlignedBuffer<float> norm1, norm1_mean, norm1_rstd;
  AlignedBuffer<float> qkv;      // [BT, qkv_dim], q and k after their norms and rope
  AlignedBuffer<float> qk_saved, qk_rstd;  // q/k norms: their inputs and reciprocal RMS
  AlignedBuffer<float> attn;     // [BT, attn_dim]
  AlignedBuffer<float> lse;      // [B, H, T]
  AlignedBuffer<float> mid;      // residual after attention [rows, C]
  AlignedBuffer<float> norm2, norm2_mean, norm2_rstd;
  AlignedBuffer<float> mlp_in;   // [BT, mlp_in_dim] (pre-activation)
  AlignedBuffer<float> mlp_act;  // [BT, mlp_act_dim]
  // Sandwich norms: each branch's output before its norm [rows, C], and the norm's rstd [rows].
  AlignedBuffer<float> attn_proj, attn_post_rstd, mlp_proj, mlp_post_rstd;
  size_t bytes() const;
};

// Gradient scratch every block's backward shares, [BT, width] each. dnorm (the
// input gradient of a column-parallel pair) is also the output head's.
struct BlockScratch {
  AlignedBuffer<float> dnorm, dqkv, dattn, dmlp_in, dmlp_act;
  AlignedBuffer<float> dpost;  // sandwich norms: d(branch output) [rows, C]
  size_t bytes() const;
};

class TrainBlock {
 public:
  // `shard`: this rank's widths; B*T rows (all of them, whatever the parallel layers hold).
  TrainBlock(const ModelConfig& shard, int64_t BT, ParallelLayers& par, TrainAttention& attention,
             BlockScratch& scratch);

  void alloc(BlockActs& a) const;
  void alloc(BlockScratch& s) const;
  // Block matrices in the family's layout, multiplied in `compute`.
  void set_matmul_mode(kernels::MatmulMode mode) { mode_ = mode; }

  // out [rows, C] from in [rows, C] (this rank's rows of the residual stream), for
  // the model's layer `layer` (its attention variant: ModelConfig::layer_attention).
  void forward(int layer, const LayerTensors& w, const float* in, BlockActs& a, float* out);
  // dresid: d(out) on entry, d(in) on exit (this rank's rows); accumulates (+=) the
  // parameter gradients into g.
  void backward(int layer, const LayerTensors& w, const LayerTensors& g, const float* in, BlockActs& a,
                float* dresid);

 private:
  ModelConfig cfg_;
  MlpKind mlp_;
  bool post_norms_;
  bool qk_plus_one_;  // the q/k norms scale by 1 + w (kRmsNormPlusOne)
  AlignedBuffer<float> qk_weights_;  // then their effective weights 1 + w, q's then k's [2, head_dim]
  int64_t BT_;
  ParallelLayers& par_;
  TrainAttention& attention_;
  BlockScratch& s_;
  kernels::MatmulMode mode_;

  QkNorm qk_norm(const LayerTensors& w, BlockActs& a);
  // d(branch output) from d(block output) `dresid` (this rank's rows): through the
  // sandwich norm when there is one (its weight gradient into g), else dresid itself.
  const float* post_norm_backward(const float* weight, float* dweight, const AlignedBuffer<float>& proj,
                                  const AlignedBuffer<float>& rstd, const float* dresid);
};

}  // namespace distllm
