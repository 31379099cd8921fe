// Inference forward over a paged KV cache: one batched pass over any mix of
// prefill chunks and decode tokens from many sequences.
//
// Every kernel on this path is batch-invariant (linear_bi, paged_attention,
// row-wise norms): a sequence's logits do not depend on the other sequences in the
// batch, on how its prompt was chunked, or on the thread count. Greedy decoding is
// therefore reproducible under continuous batching.
//
// Tensor parallelism (tensor_parallel.h): a model built with a shard packs only
// this rank's heads, MLP columns and vocabulary rows and runs its heads over its own
// paged K/V (size the cache with shard_config()); every rank returns the full
// logits (tests/model/mpi/tp_inference_test.cpp measures how close to one rank's).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "distllm/base/aligned_buffer.h"
#include "distllm/base/tensor_parallel_comm.h"
#include "distllm/kernels/linear_bi.h"
#include "distllm/kernels/rope.h"
#include "distllm/model/kv_cache.h"
#include "distllm/model/model_weights.h"
#include "distllm/model/tensor_parallel.h"
#include "distllm/model/transformer.h"

namespace distllm {

struct InferenceChunk {
  const int32_t* tokens = nullptr;  // n tokens at positions [start_pos, start_pos + n)
  int n = 0;
  int start_pos = 0;                 // K/V for [0, start_pos) are already in the cache
  const int32_t* block_table = nullptr;
  int num_blocks = 0;                // entries in block_table; must cover start_pos + n
  // Logits for the chunk's last num_logits positions (0: none; 1: the newest token;
  // k+1: a speculative decode verifying k draft tokens). At most n.
  int num_logits = 0;
};

// This rank's tensor-parallel shard: its plan and its tp group's collectives, both
// outliving the model. Inactive (the whole model) without a plan or at tp size 1.
struct InferenceTensorParallel {
  const TensorParallelPlan* plan = nullptr;
  TensorParallelComm* comm = nullptr;
  bool active() const { return plan != nullptr && plan->size() > 1; }
};

class InferenceModel {
 public:
  // Weights are packed for inference (kernels::PackedLinear): every linear as
  // [out, in] in groups of 4 interleaved rows (GPT-2's Conv1D [in, out] weights are
  // transposed first). Norms, biases and embeddings are read in place.
  // `weight_dtype` (f32, bf16 or i8) is how the packed linears and the LM head are
  // stored (bf16 weight-only; int8 as q8_0 x q8_0, the linears' inputs quantized per
  // 32-wide block too; norms, attention and accumulation stay f32; see
  // kernels/linear_bi.h). Throws distllm::Error for another dtype.
  // With an active `tp`, `model` is the whole model (plan.full()); only this rank's
  // slices are kept, and every forward is collective over tp.comm.
  explicit InferenceModel(std::shared_ptr<const Transformer> model, DType weight_dtype = DType::kF32,
                          InferenceTensorParallel tp = {});
  // The same from weights wherever they are (model_weights.h). A flat f32 buffer is
  // read in place and kept alive; from any other source (memory-mapped safetensors
  // in bf16, f16 or f32) the packed linears are built 4 rows at a time, the token
  // table is copied in its own dtype and the small tensors widened, so the source
  // may be dropped afterwards and the model is never widened whole. Under tp a
  // non-flat source is widened once to be sliced.
  explicit InferenceModel(std::shared_ptr<const ModelWeights> weights, DType weight_dtype = DType::kF32,
                          InferenceTensorParallel tp = {});

  // The whole model's configuration (vocabulary, context, layers).
  const ModelConfig& config() const { return cfg_; }
  // This rank's part: its query and key/value heads, MLP columns and vocabulary rows
  // (config() when not split). A PagedKvCache for this model takes this geometry.
  const ModelConfig& shard_config() const { return shard_; }
  DType weight_dtype() const { return weight_dtype_; }
  // Bytes of packed weights one decode step streams (every linear and the LM head).
  size_t packed_weight_bytes() const;

  // Runs the batch, writing K/V of every chunk's tokens into the cache and the
  // logits of each chunk's last num_logits positions (chunks in batch order,
  // positions in order within a chunk) into `logits` [sum of num_logits, vocab].
  // Every logits row depends only on its own sequence's tokens before it, never on
  // the batch, the chunking or num_logits: the head runs row-wise (linear_bi). Validates tokens, positions and block tables first.
  void forward(const std::vector<InferenceChunk>& batch, PagedKvCache& cache, std::vector<float>& logits);

 private:
  struct Layer {
    const float *attn_norm_w, *attn_norm_b, *qkv_b, *attn_out_b;
    const float *mlp_norm_w, *mlp_norm_b, *mlp_in_b, *mlp_out_b;
    const float *q_norm_w, *k_norm_w;  // per-head q/k norms (qk_norm; as 1 + w for kRmsNormPlusOne), else null
    const float *attn_post_norm_w, *mlp_post_norm_w;  // sandwich norms (post_norms), else null
    kernels::PackedLinear qkv, attn_out, mlp_in, mlp_out;
  };
  std::shared_ptr<const ModelWeights> weights_;  // a flat source the views point into; else null
  ModelConfig cfg_, shard_;
  BlockSpec block_;  // the family's norm, MLP and positions
  InferenceTensorParallel tp_;
  AlignedBuffer<float> shard_params_;     // plan.local_layout(): this rank's slices
  std::vector<int64_t> vocab_rows_;       // per rank of the tp group: its vocabulary rows
  DType weight_dtype_ = DType::kF32;
  std::vector<Layer> layers_;
  kernels::PackedLinear lm_head_;
  const void* wte_ = nullptr;       // [V, C] token table (this rank's rows under tp)
  DType wte_dtype_ = DType::kF32;   // f32, or bf16/f16 as a non-flat source stores it
  AlignedBuffer<uint8_t> wte_copy_;  // the table, from a non-flat source
  std::vector<AlignedBuffer<float>> owned_;  // widened norms, biases, positions
  const float* wpe_ = nullptr;
  const float* final_norm_w_ = nullptr;
  const float* final_norm_b_ = nullptr;
  kernels::RopeTable rope_;
  kernels::RopeTable local_rope_;  // windowed layers with their own RoPE base (rope_local_theta)
  // Scratch, grown to the largest batch seen.
  AlignedBuffer<float> x_, h_, qkv_, att_, mlp_in_, mlp_act_, last_, shard_logits_, gathered_;
  std::vector<int32_t> shard_tokens_;
  int64_t capacity_ = 0;

  void build(const ModelWeights& weights);
  void reserve(int64_t tokens);
  void norm(const float* w, const float* b, const float* in, float* out, int64_t rows) const;
  // x_[0, N) = token (+ position) embeddings; under tp each token's row comes from
  // the rank holding it (one all-reduce), positions added after the sum.
  void embed(const int32_t* tokens, const int32_t* positions, int64_t N);
  // out [N, C] = in [N, in_dim] x W + bias; under tp the partial products over this
  // rank's input columns are summed over the group, then the bias is added once.
  void row_parallel(float* out, const float* in, int in_dim, const kernels::PackedLinear& w, const float* bias,
                    int64_t N);
  // logits [rows, V] from the final hidden states h_; under tp each rank computes
  // its vocabulary columns and they are all-gathered into vocabulary order. Soft-
  // capped (final_logit_softcap) when the model says so.
  void lm_head(float* logits, int64_t rows);
};

}  // namespace distllm
