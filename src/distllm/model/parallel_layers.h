// The parallel layers the training graph's blocks are written with: a norm, the
// column-parallel linear's input and input gradient, the row-parallel linear, and
// the token embedding. Without tensor parallelism each is the plain one-rank
// operation; with it, each does the collective tensor_parallel.h assigns it (and,
// under sequence parallelism, works on this rank's rows of the residual stream), so
// a block's forward and backward read the same top to bottom in every mode
// (train_block.h).
#pragma once

#include <cstdint>
#include <vector>

#include "distllm/base/aligned_buffer.h"
#include "distllm/base/tensor_parallel_comm.h"
#include "distllm/base/context_parallel_comm.h"
#include "distllm/kernels/matmul.h"
#include "distllm/model/block_spec.h"
#include "distllm/model/param_layout.h"
#include "distllm/model/tensor_parallel.h"

namespace distllm {

// A tensor-parallel shard's plan and its group's collectives (both outlive the graph).
struct TensorParallel {
  const TensorParallelPlan* plan = nullptr;
  TensorParallelComm* comm = nullptr;
  bool sequence_parallel = false;
  bool active() const { return plan != nullptr && plan->size() > 1; }
};

// A context-parallel group's ring (outlives the graph; ring_attention.h).
struct ContextParallel {
  ContextParallelComm* comm = nullptr;
  bool active() const { return comm != nullptr && comm->size() > 1; }
  int size() const { return comm ? comm->size() : 1; }
  int rank() const { return comm ? comm->rank() : 0; }
};

class ParallelLayers {
 public:
  // B*T rows of width C (the shard's config: its heads and hidden units).
  ParallelLayers(const ModelConfig& shard, const TensorParallel& tp, int64_t BT);

  bool tensor_parallel() const { return tp_.active(); }
  bool sequence_parallel() const { return sp_; }
  // The residual stream's rows this rank holds: all B*T, or [row_begin, row_begin +
  // rows) under sequence parallelism.
  int64_t rows() const { return rows_; }
  int64_t row_begin() const { return row_begin_; }

  // Norm of this rank's rows of `in` into out [BT, C] (all rows: gathered under
  // sequence parallelism); mean and rstd per held row.
  void norm_forward(const float* weight, const float* bias, const float* in, float* out, float* mean, float* rstd);
  // Norm of this rank's rows of `in` into this rank's rows `out` [rows, C], nothing
  // gathered: a sandwich norm on a row-parallel linear's output (block_spec.h:
  // post_norms). Its backward is norm_backward's.
  void local_norm_forward(const float* weight, const float* in, float* out, float* rstd);
  // Accumulates d(in) into dresid from this rank's rows of d(out), and the
  // parameter gradients (summed over the group under sequence parallelism).
  void norm_backward(const float* weight, float* dweight, float* dbias, const float* dout, const float* in,
                     const float* mean, const float* rstd, float* dresid);
  // All B*T rows of `mine` (this rank's rows: gathered under sequence parallelism),
  // as the input of a row-parallel linear's backward.
  const float* all_rows(const float* mine);
  // A column-parallel linear's input gradient `partial` [BT, C] (each rank's part
  // of the sum) summed: this rank's rows of it (in place without sequence parallelism).
  const float* reduce_input_grad(float* partial);
  // out [rows, C] = in [BT, in_dim] @ w (+ b), summed over the group's parts.
  void row_parallel_forward(float* out, const float* in, const float* w, const float* b, int in_dim,
                            kernels::MatmulMode mode);
  // out [rows, C]: token (+ learned position) embeddings of this rank's rows;
  // `tokens` are this rank's table rows (-1 for tokens another rank holds).
  void embed_forward(const EmbedTensors& emb, const int32_t* tokens, const int32_t* positions, float* out);
  // Sums over the group (a no-op without tensor parallelism).
  void allreduce(float* data, int64_t n);

  size_t scratch_bytes() const;

 private:
  NormKind norm_;
  float eps_;
  int C_;
  int64_t BT_;
  TensorParallel tp_;
  bool sp_ = false;
  int64_t rows_ = 0, row_begin_ = 0;
  std::vector<int64_t> row_counts_;  // every rank's rows x C (the collectives' block sizes)
  // Sequence parallel: a row-parallel output before its reduce-scatter, a gathered
  // [BT, C] gradient, this rank's rows of an input gradient, and the norms'
  // parameter gradients of one micro-step.
  AlignedBuffer<float> partial_, dfull_, dmine_, norm_grad_;
};

}  // namespace distllm
