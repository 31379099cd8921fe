// Tensor parallelism (Megatron-LM): what it means in distllm, in one place. The
// training graph (parallel_layers.h), the inference model (inference.h), the
// data-parallel strategies and the plan all follow what this file says.
//
// Per block, the attention heads and the MLP's hidden units are split over the
// ranks of a tensor-parallel (tp) group:
//   column-parallel  q/k/v, MLP in (W_in, or gate|up): each rank computes its own
//                    heads / hidden units from the whole input, no collective
//   row-parallel     attention out, MLP out: each rank's partial product is
//                    all-reduced (Megatron's g), its bias added once after the sum
// and in backward the input gradient of each column-parallel pair is all-reduced
// (Megatron's f). The token embedding and the LM head are split by vocabulary rows:
// each token's embedding row comes from the one rank holding it (an all-reduce);
// training's cross-entropy combines each row's log-sum-exp from every rank's part,
// so the full [tokens, vocab] logits are never gathered, while inference
// all-gathers its logits rows. Norms, row-parallel biases and learned positions are
// replicated: every rank holds and updates the same copy (their gradients count
// once in the norm: norm_weight). Which tensor splits how is each family's
// TensorSpec::split (family.h); TensorParallelPlan turns it into slices.
//
// Grouped-query attention: the key/value heads are split when the tp size divides
// them; when it is a multiple of them, each rank holds the one key/value head its
// query heads share (replicated over tp / n_kv_head ranks, whose gradients are then
// summed). A head count the tp size cannot split is refused at start. The MLP width
// and the vocabulary may split unevenly (balanced ranges).
//
// Sequence parallelism (Megatron-SP, training only, with tp): the residual stream
// and the norms run on 1/tp of the B*T rows per rank; each norm's output is
// all-gathered before the column-parallel linear, and each row-parallel output is
// reduce-scattered to the rows' owners instead of all-reduced (the same bytes as the
// all-reduce, which is a reduce-scatter plus an all-gather). Backward mirrors it;
// the norms' parameter gradients, computed from a rank's rows, are summed.
//
// Sums over ranks add partial products in another order than one rank's dot
// products: a tp run matches the unsplit model to rounding, not bit for bit.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "distllm/base/tensor_parallel_comm.h"
#include "distllm/model/config.h"
#include "distllm/model/param_layout.h"

namespace distllm {

// Where a shard's tensor comes from in the whole (Hugging Face) tensor: the
// concatenation, along `axis`, of the ranges (the other axis whole). A 1-D tensor
// splits along axis 0. axis -1: replicated (the whole tensor on every rank).
struct TensorSlice {
  int axis = -1;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // [begin, end) along axis
  bool replicated() const { return axis < 0; }
};

class TensorParallelPlan {
 public:
  // Throws distllm::Error naming the field a tp size of `size` cannot split.
  TensorParallelPlan(const ModelConfig& full, int size, int rank);

  int size() const { return size_; }
  int rank() const { return rank_; }
  const ModelConfig& full() const { return full_; }
  // The shard as a config: its own n_head, n_kv_head, intermediate_size and
  // vocab_size (rows of the embedding / LM head); n_embd and head_dim whole. Not a
  // model of its own (gpt2's head_dim no longer equals n_embd / n_head).
  const ModelConfig& local() const { return local_; }
  const ParamLayout& full_layout() const { return full_layout_; }
  const ParamLayout& local_layout() const { return local_layout_; }

  int head_begin() const { return head_begin_; }
  int kv_head_begin() const { return kv_head_begin_; }
  // Ranks that hold each key/value head (1 when the heads are split).
  int kv_replicas() const { return kv_replicas_; }
  int64_t mlp_begin() const { return mlp_begin_; }
  int vocab_begin() const { return vocab_begin_; }

  // Per tensor, in layout order (the local and the full layout list the same names).
  const TensorSlice& slice(int tensor) const { return slices_.at(static_cast<size_t>(tensor)); }
  // The gradient-norm weight of each tensor: 1 for split tensors, 1 / (ranks that
  // hold a copy) for replicated ones, so the tp group's sum counts each once.
  float norm_weight(int tensor) const;
  // Whether a tensor's gradient must be summed over the ranks holding a copy of it
  // (replicated key/value heads: each rank's query heads contribute a part).
  bool grad_needs_kv_sum(int tensor) const;

  // This rank's part of a whole flat buffer (full layout) into a shard buffer
  // (local layout; padding zero), and back: the shard's tensors written into their
  // places in the whole buffer.
  void full_to_local(const float* full, float* local) const;
  void local_to_full(const float* local, float* full) const;

  // [begin, end) of part `index` when n splits into `parts` balanced ranges.
  static std::pair<int64_t, int64_t> split(int64_t n, int parts, int index);

 private:
  ModelConfig full_, local_;
  int size_ = 1, rank_ = 0;
  int head_begin_ = 0, kv_head_begin_ = 0, kv_replicas_ = 1, vocab_begin_ = 0;
  int64_t mlp_begin_ = 0;
  ParamLayout full_layout_, local_layout_;
  std::vector<TensorSlice> slices_;

  TensorSlice slice_for(const ParamTensor& t) const;
  // Copies between one whole tensor and its shard; to_local picks the direction.
  void copy_tensor(int tensor, const float* from, float* to, bool to_local) const;
};

// The whole model's flat parameters (plan.full_layout()) on every rank of the tp
// group, from each rank's shard (plan.local_layout()). Collective over `comm`, whose
// rank r holds shard r.
void gather_tensor_parallel(TensorParallelComm& comm, const TensorParallelPlan& plan, const float* local,
                            float* full);

// The cross-entropy of an LM head split by vocabulary: logits [N, Vl] are this
// rank's columns [vocab_begin, vocab_begin + Vl) of each row. Writes each row's
// loss (0 for kIgnoreIndex targets), identical on every rank. With `grad_scale`
// > 0 it then overwrites the logits with grad_scale * (softmax - onehot) of this
// rank's columns. Two small all-reduces per call (max, then sum-exp with the
// target's logit).
void vocab_parallel_cross_entropy(float* losses, float* logits, const int32_t* targets, int64_t N, int Vl,
                                  int vocab_begin, float grad_scale, bool compute_grad, TensorParallelComm& comm);

}  // namespace distllm
