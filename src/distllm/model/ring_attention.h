// Ring attention: causal attention over a sequence split into contiguous blocks
// across the ranks of a context-parallel (cp) group. Rank r holds positions
// [r*T, (r+1)*T) of every sequence: its queries, keys and values. The key/value
// blocks travel around the ring (cp - 1 shifts); each rank attends to the blocks
// at or before its own and combines the partial results with their log-sum-exps
// (an online softmax), so no rank ever holds the whole sequence's keys and values.
//
// Backward sends the key/value blocks around again together with their gradient
// accumulators: each rank adds its queries' contribution to the block it holds,
// and after a full turn every block's gradient is back with its owner. The
// probabilities of a block are recomputed from the whole attention's lse and the
// row sums from the whole output (delta = rowsum(dO * O)), as FlashAttention-2's
// backward does, so each block's gradient is its exact part of the whole.
//
// Blocks are contiguous, so with causal masking rank r computes r + 1 blocks and
// the last rank does the most work (no load-balancing zig-zag order).
#pragma once

#include <cstdint>

#include "distllm/base/aligned_buffer.h"
#include "distllm/base/context_parallel_comm.h"
#include "distllm/model/config.h"

namespace distllm {

class RingAttention {
 public:
  // `config`: the (tensor-parallel shard's) heads; B sequences of T tokens per rank.
  RingAttention(const ModelConfig& config, int batch, int block_len, ContextParallelComm& comm);

  // qkv [B*T, qkv_dim] (q and k after rope) of this rank's block; writes the
  // attention output [B*T, attn_dim] and the log-sum-exp [B, n_head, T].
  void forward(const float* qkv, float* out, float* lse);
  // dout [B*T, attn_dim] -> dqkv [B*T, qkv_dim] (overwritten), from the forward's
  // qkv, out and lse.
  void backward(const float* qkv, const float* out, const float* lse, const float* dout, float* dqkv);

  size_t buffer_bytes() const;

 private:
  ModelConfig cfg_;
  int B_, T_;
  ContextParallelComm& comm_;
  int64_t kv_width_;  // n_kv_head * head_dim
  AlignedBuffer<float> cur_, next_;          // travelling blocks: [B*T, 2 or 4 x kv_width]
  AlignedBuffer<float> block_out_, block_lse_, delta_;

  // The block this rank holds after `shift` shifts, and whether its queries see it.
  int block_at(int shift) const { return (comm_.rank() - shift + comm_.size()) % comm_.size(); }
  void pack_kv(const float* qkv, int64_t width);
  void shift(int64_t width);
};

}  // namespace distllm
