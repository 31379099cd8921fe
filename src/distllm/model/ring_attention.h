// Ring attention: causal attention over a sequence split across the ranks of a
// context-parallel (cp) group. Each rank holds two chunks of every sequence
// (ContextLayout: the zig-zag order) with their queries, keys and values. The
// key/value blocks travel around the ring (cp - 1 shifts); each rank attends to the
// chunks at or before each of its own and combines the partial results with their
// log-sum-exps (an online softmax), so no rank ever holds the whole sequence's keys
// and values.
//
// Backward sends the key/value blocks around again together with their gradient
// accumulators: each rank adds its queries' contribution to the block it holds,
// and after a full turn every block's gradient is back with its owner.
//
// The key/value blocks travel while the rank computes on the block it holds (the
// next shift starts before the attention of this one): forward hides its shifts
// behind the computation, backward the key/value half of its traffic. The gradient
// accumulators can only leave once this rank's contribution is in them. The
// probabilities of a block are recomputed from the whole attention's lse and the
// row sums from the whole output (delta = rowsum(dO * O)), as FlashAttention-2's
// backward does, so each block's gradient is its exact part of the whole.
//
// Zig-zag: the sequence is cut into 2 * cp chunks and rank r holds chunks r and
// 2cp - 1 - r. Under the causal mask every rank then computes the same number of
// chunk pairs (3 with its own block, 2 with each other), where contiguous blocks
// would give the last rank cp times the first one's work.
#pragma once

#include <cstdint>

#include "distllm/base/aligned_buffer.h"
#include "distllm/base/context_parallel_comm.h"
#include "distllm/model/config.h"

namespace distllm {

// Which tokens of a sequence a rank of a cp group holds.
struct ContextLayout {
  int cp = 1, rank = 0, seq_len = 0;
  // seq_len must be a multiple of 2 * cp (throws distllm::Error naming it).
  ContextLayout(int cp, int rank, int seq_len);
  int chunk() const { return seq_len / (2 * cp); }
  int local_len() const { return 2 * chunk(); }
  // The chunk index (in the sequence) of this rank's first (0) or second (1) chunk.
  int chunk_index(int which) const { return which == 0 ? rank : 2 * cp - 1 - rank; }
  // Position in the sequence of this rank's local token t, t in [0, local_len()).
  int position(int t) const { return chunk_index(t / chunk()) * chunk() + t % chunk(); }
};

class RingAttention {
 public:
  // `config`: the (tensor-parallel shard's) heads; B sequences of seq_len tokens,
  // of which this rank holds ContextLayout's 2 chunks.
  RingAttention(const ModelConfig& config, int batch, int seq_len, ContextParallelComm& comm);

  // qkv [B*T, qkv_dim] (q and k after rope) of this rank's block; writes the
  // attention output [B*T, attn_dim] and the log-sum-exp [B, n_head, T].
  void forward(int layer, const float* qkv, float* out, float* lse);
  // dout [B*T, attn_dim] -> dqkv [B*T, qkv_dim] (overwritten), from the forward's
  // qkv, out and lse.
  void backward(int layer, const float* qkv, const float* out, const float* lse, const float* dout, float* dqkv);

  size_t buffer_bytes() const;

 private:
  ModelConfig cfg_;
  int B_;
  ContextLayout layout_;
  int C_, T_;  // chunk length, local tokens (2 chunks) per sequence
  ContextParallelComm& comm_;
  int64_t kv_width_;  // n_kv_head * head_dim
  // Travelling blocks, [B*T, 2 x kv_width] each: keys|values (kv_), and in backward
  // their gradients dk|dv (grad_); [0] is held, [1] receives the next one.
  AlignedBuffer<float> kv_[2], grad_[2];
  AlignedBuffer<float> block_out_, block_lse_;  // one chunk pair's result: [B, C, attn], [B, H, C]
  AlignedBuffer<float> chunk_lse_, chunk_delta_;  // per query chunk: [2][B, H, C]

  // The block this rank holds after `shift` shifts (its owner's rank).
  int block_at(int shift) const { return (comm_.rank() - shift + comm_.size()) % comm_.size(); }
  void pack_kv(const float* qkv);
  // Starts moving the held key/value block on (start_kv_shift), and takes the one
  // received as the held one (finish_kv_shift); shift_grads moves the gradients.
  void start_kv_shift();
  void finish_kv_shift();
  void shift_grads();
  // Calls fn(query chunk, key chunk, query offset) for every pair of this rank's
  // chunks and the held block's that the causal mask lets see each other.
  template <typename Fn>
  void for_each_visible_pair(int owner, int window, Fn&& fn) const;
  // Merges the chunk pair result (block_out_, block_lse_) into query chunk qi's rows.
  void combine(int qi, bool first, float* out, float* lse);
};

}  // namespace distllm
