// Causal multi-head attention with grouped-query heads (n_kv_head divides n_head;
// query head h reads kv head h / (n_head / n_kv_head)), optionally over a sliding
// window of keys and with soft-capped scores.
//
// Scores are computed tile by tile (64 query rows at a time) with sgemm, softmaxed
// in place, and multiplied into V, so only a 64 x kv_len scratch tile per thread
// exists. Backward recomputes the probabilities from the saved log-sum-exp (as
// FlashAttention does) instead of storing a [T, T] matrix per head.
#pragma once

#include <cstdint>

namespace distllm::kernels {

struct AttentionArgs {
  int batch = 1;
  int n_head = 1;
  int n_kv_head = 1;
  int head_dim = 1;
  // The queries are the last q_len of kv_len positions: query r sits at position
  // kv_len - q_len + r and sees keys [0, that position]. Training has q_len == kv_len.
  int q_len = 1;
  int kv_len = 1;
  // Ring attention (context parallelism) attends to another rank's block of keys:
  // query r then sees keys [0, query_offset + r] of this block (all of them when
  // query_offset >= kv_len). -1: kv_len - q_len, the case above.
  int query_offset = -1;
  float scale = 1.0f;  // usually 1/sqrt(head_dim)
  // Sliding window (Mistral, Gemma's local layers): a query at position p sees only
  // keys p - window < j <= p, itself included. 0: every key before it. Positions
  // count from the keys' start (with query_offset, from this block's first key), so
  // a row may see no key of a block at all: its output is 0 and its lse -inf.
  int window = 0;
  // Soft-capping (Gemma 2): a scaled score s becomes softcap * tanh(s / softcap)
  // before the softmax. 0: none.
  float softcap = 0.0f;

  // Element (b, t, h, d) of X lives at X + b*X_batch_stride + t*X_row_stride + h*head_dim + d.
  const float* q = nullptr;
  int64_t q_row_stride = 0, q_batch_stride = 0;
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t kv_row_stride = 0, kv_batch_stride = 0;
  float* out = nullptr;
  int64_t out_row_stride = 0, out_batch_stride = 0;
  // Log-sum-exp of each query's scores, [batch, n_head, q_len]; may be null.
  float* lse = nullptr;
};

void attention_forward(const AttentionArgs& a);

// Gradients. dq/dk/dv use the strides of q/k/v respectively and are overwritten,
// or added to with `accumulate`. `a.out` and `a.lse` must hold the forward results;
// dout uses out's strides.
//
// For one block of a ring attention pass the whole attention's lse and `delta`
// (rowsum(dO * O) of the whole attention's output, [batch, n_head, q_len]): the
// block's probabilities are then its part of the whole softmax, and its gradients
// its part of the whole gradient. Without delta the row sums come from this call's
// probabilities (exact zero for a row that sees one key).
struct AttentionGrads {
  float* dq = nullptr;
  float* dk = nullptr;
  float* dv = nullptr;
  const float* dout = nullptr;
  const float* delta = nullptr;
  bool accumulate = false;
};
void attention_backward(const AttentionArgs& a, const AttentionGrads& g);

}  // namespace distllm::kernels
