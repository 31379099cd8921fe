// Inference forward over a paged KV cache: one batched pass over any mix of
// prefill chunks and decode tokens from many sequences.
//
// Every kernel on this path is batch-invariant (linear_bi, paged_attention,
// row-wise norms): a sequence's logits do not depend on the other sequences in the
// batch, on how its prompt was chunked, or on the thread count. Greedy decoding is
// therefore reproducible under continuous batching.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "distllm/base/aligned_buffer.h"
#include "distllm/kernels/linear_bi.h"
#include "distllm/kernels/rope.h"
#include "distllm/model/kv_cache.h"
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

class InferenceModel {
 public:
  // Weights are packed for inference (kernels::PackedLinear): every linear as
  // [out, in] in groups of 4 interleaved rows (GPT-2's Conv1D [in, out] weights are
  // transposed first). Norms, biases and embeddings are read in place.
  // `weight_dtype` (f32, bf16 or i8) is how the packed linears and the LM head are
  // stored (weight-only: activations, norms and accumulation stay f32; see
  // kernels/linear_bi.h). Throws distllm::Error for another dtype.
  explicit InferenceModel(std::shared_ptr<const Transformer> model, DType weight_dtype = DType::kF32);

  const ModelConfig& config() const { return cfg_; }
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
    kernels::PackedLinear qkv, attn_out, mlp_in, mlp_out;
  };
  std::shared_ptr<const Transformer> model_;
  ModelConfig cfg_;
  DType weight_dtype_ = DType::kF32;
  std::vector<Layer> layers_;
  kernels::PackedLinear lm_head_;
  const float* wte_ = nullptr;
  const float* wpe_ = nullptr;
  const float* final_norm_w_ = nullptr;
  const float* final_norm_b_ = nullptr;
  kernels::RopeTable rope_;
  // Scratch, grown to the largest batch seen.
  AlignedBuffer<float> x_, h_, qkv_, att_, mlp_in_, mlp_act_, last_;
  int64_t capacity_ = 0;

  void reserve(int64_t tokens);
  void norm(const float* w, const float* b, const float* in, float* out, int64_t rows) const;
};

}  // namespace distllm
