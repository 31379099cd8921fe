// Training forward and backward for a fixed (batch, seq) shape, written layer by
// layer (llm.c style, no general autograd). Activations that backward needs are
// kept per layer; everything else is scratch shared across layers.
//
// Parameters and gradients are reached group by group through a ParamSource, and
// distributed strategies plug in through TrainHooks at group boundaries:
//   before_group_forward(g):  about to read group g's parameters (ZeRO-3 gathers
//                             here and prefetches the next group)
//   after_group_forward(g):   forward is done with them (ZeRO-3 may free them)
//   before_group_backward(g): about to read layer g's parameters in backward
//   group_grads_ready(g):     group g's gradients are final for this micro-batch
//                             (DDP all-reduces / ZeRO reduce-scatters here)
//   embedding_backward:       when set, replaces the embedding's backward (the
//                             scatter-add of the input gradient into the token and
//                             position rows), so data parallelism can reduce those
//                             few rows on their own instead of the whole table
// Groups are those of ParamLayout: embed (0), layer i (1 + i), head (n_layer + 1).
// Forward visits embed, layers 0..L-1, head. With gradients the head's backward
// runs inside forward (chunk by chunk, while its logits are in cache), so the head
// gets no after_group_forward then; a tied head also reads the embedding group's
// parameters and writes its gradients, between before_group_forward(head) and
// group_grads_ready(head). Backward finishes groups in the order head, layer L-1,
// ..., layer 0, embed; the embedding backward reads no parameters.
//
// Tensor and sequence parallelism (parallel_layers.h): given a plan and its
// group's collectives, the graph computes one shard of every layer (its heads, MLP
// columns and vocabulary rows) with Megatron's collectives; every rank of the group
// then holds the same residual stream (or its rows of it), loss and replicated-
// parameter gradients. ParamSource serves the shard's flat buffers (the plan's local
// layout). The embedding_backward hook receives token ids of this rank's rows (-1
// for tokens another rank holds).
//
// Context parallelism (ring_attention.h): given its group's ring, the graph holds
// T / cp tokens of each sequence (ContextLayout's two chunks), and attention runs
// as ring attention over the group; everything else is per token. forward() then
// takes this rank's [B, T / cp] tokens and targets, in ContextLayout's order.
//
// Pipeline parallelism (stage_range.h): given a stage, the graph holds and runs only
// that stage's layers (and the embedding on the first stage, the final norm and
// head on the last), and visits only their groups. A stage after the first starts
// forward from the activation written into stage_input(); a stage before the last
// ends forward with stage_output(), starts backward from the gradient written into
// stage_output_grad(), and a stage after the first ends it with stage_input_grad().
// Only the last stage computes (and returns) a loss; the others return 0.
//
// Compute dtype (set_compute_dtype): with bf16 every linear product (the layers'
// and the output head's, forward, backward-input and backward-weight) runs in
// kernels::gemm_bf16, bf16 inputs with f32 sums; parameters, gradients, activations,
// norms, softmax, cross-entropy and attention (its own f32 products) stay f32.
//
// Activation checkpointing keeps only the input of a checkpointed layer and runs
// its forward again inside backward; the recomputation is bit-identical, so loss and
// gradients do not change.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distllm/base/aligned_buffer.h"
#include "distllm/kernels/matmul.h"
#include "distllm/model/param_source.h"
#include "distllm/model/parallel_layers.h"
#include "distllm/model/stage_range.h"
#include "distllm/model/train_attention.h"
#include "distllm/model/train_block.h"
#include "distllm/model/train_head.h"
#include "distllm/model/transformer.h"

namespace distllm {

struct TrainHooks {
  std::function<void(int group)> before_group_forward;
  std::function<void(int group)> after_group_forward;
  std::function<void(int group)> before_group_backward;
  std::function<void(int group)> group_grads_ready;
  // d_out [rows, C] is the gradient of the embedding's output; tokens and positions
  // [rows] say which table rows it belongs to.
  std::function<void(const float* d_out, const int32_t* tokens, const int32_t* positions, int64_t rows)>
      embedding_backward;
};

struct ForwardArgs {
  bool compute_grad = false;
  // The loss gradient is scaled by grad_scale / normalizer, where normalizer is
  // loss_normalizer, or this batch's count of valid targets when that is 0. Data
  // parallel ranks pass the count over all ranks' batches, so the gradients they
  // sum are the single-process gradient of the whole batch.
  float grad_scale = 1.0f;
  int64_t loss_normalizer = 0;
  float* logits_out = nullptr;  // receives all [B*T, V] logits (tests, evaluation)
  const TrainHooks* hooks = nullptr;
};

// Which layers keep only their input and recompute the rest in backward.
struct ActivationCheckpointing {
  int every = 0;  // 0: none; K: layers 0, K, 2K, ... (1: every layer)
  bool applies(int layer) const { return every > 0 && layer % every == 0; }
  // "none", "all" or "every:K"; throws naming the value otherwise.
  static ActivationCheckpointing parse(const std::string& text);
  std::string describe() const;
};

class TrainGraph {
 public:
  // seq_len: the whole sequence (context parallelism gives this rank seq_len / cp).
  TrainGraph(const ModelConfig& config, int batch, int seq_len, ActivationCheckpointing checkpointing = {},
             TensorParallel tp = {}, ContextParallel cp = {},
             StageRange stage = {});  // default: the whole model

  int batch() const { return B_; }
  int seq_len() const { return T_; }  // tokens of each sequence this rank holds
  int full_seq_len() const { return full_T_; }  // the whole sequence (the constructor's seq_len)

  // Runs the forward pass on tokens/targets [B, T] and returns the summed
  // cross-entropy over targets that are not -100, divided by the normalizer (see
  // ForwardArgs; the mean loss when loss_normalizer is 0).
  //
  // With compute_grad, also starts the backward pass: the output head's gradient is
  // computed chunk by chunk while its logits are hot in cache (never materialising
  // all [B*T, V] logits) and accumulated into the gradients. Call backward() next.
  float forward(ParamSource& params, const int32_t* tokens, const int32_t* targets, const ForwardArgs& args);
  // Accumulates (+=) every parameter's gradient.
  void backward(ParamSource& params, const TrainHooks* hooks = nullptr);

  // Pipeline stage boundaries, each [B*T, C] (see above).
  const StageRange& stage() const { return stage_; }
  float* stage_input();
  const float* stage_output() const { return final_input_.data(); }
  // Floats of each of the four stage buffers: [B*T, C], this rank's rows of it
  // under sequence parallelism, of its tokens under context parallelism.
  int64_t stage_boundary_floats() const { return par_.rows() * cfg_.n_embd; }
  float* stage_output_grad() { return dresid_.data(); }
  const float* stage_input_grad() const { return dresid_.data(); }

  // Shorthands over one Transformer's flat buffers.
  float forward(Transformer& model, const int32_t* tokens, const int32_t* targets, bool compute_grad,
                float grad_scale = 1.0f, float* logits_out = nullptr, const TrainHooks* hooks = nullptr);
  void backward(Transformer& model, const TrainHooks* hooks = nullptr) {
    backward(static_cast<ParamSource&>(model), hooks);
  }

  int64_t valid_targets() const { return head_ ? head_->valid_targets() : 0; }
  // Bytes of every activation and scratch buffer this graph holds.
  size_t activation_bytes() const;
  const ActivationCheckpointing& checkpointing() const { return checkpointing_; }
  // The dtype of the linear products (f32 unless set); throws, naming the reason,
  // when this CPU cannot compute in it.
  void set_compute_dtype(kernels::ComputeDtype d);
  kernels::ComputeDtype compute_dtype() const { return compute_; }

 private:
  ModelConfig cfg_;  // the shard's sizes under tensor parallelism
  ParamLayout layout_;
  TensorParallel tp_;
  ContextParallel cp_;
  int vocab_;  // the whole vocabulary
  int B_, T_, full_T_;
  int64_t BT_;
  StageRange stage_;  // the whole model unless pipelined
  ActivationCheckpointing checkpointing_;
  kernels::ComputeDtype compute_ = kernels::ComputeDtype::kF32;
  std::vector<int32_t> positions_;  // [BT]: each row's position in its sequence
  std::vector<int32_t> tokens_;     // copies kept for the embedding backward (this rank's rows under tp)
  ParallelLayers par_;
  TrainAttention attention_;
  BlockScratch scratch_;
  TrainBlock block_;
  std::unique_ptr<TrainHead> head_;  // the last stage's
  // Residual stream entering each of the stage's layers [rows, C] (kept for every
  // layer), and the rest of each layer's activations (empty for checkpointed
  // layers, which use recompute_ in forward and again in backward); indexed by
  // layer - stage_.begin. final_input_ is the residual stream after the last one.
  std::vector<AlignedBuffer<float>> inputs_;
  std::vector<BlockActs> layers_;
  BlockActs recompute_;
  AlignedBuffer<float> final_input_;
  // d(residual stream), this rank's rows: d(stage output) on entry to backward,
  // d(stage input) at its end.
  AlignedBuffer<float> dresid_;
  bool grad_pending_ = false;

  BlockActs& acts(int layer) { return checkpointing_.applies(layer) ? recompute_ : layers_[layer - stage_.begin]; }
  float* layer_input(int layer) { return inputs_[layer - stage_.begin].data(); }
  // This rank's rows of the embedding table for each token (-1: another rank's).
  void keep_tokens(const int32_t* tokens);
};

}  // namespace distllm
