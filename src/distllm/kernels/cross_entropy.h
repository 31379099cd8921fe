// Fused softmax + cross-entropy over rows of logits, PyTorch semantics: targets equal
// to kIgnoreIndex (-100) contribute no loss and no gradient.
//
// The backward pass overwrites the logits in place with d(loss)/d(logits), so no
// probability tensor is ever materialised next to the logits.
#pragma once

#include <cstdint>

namespace distllm::kernels {

constexpr int32_t kIgnoreIndex = -100;

// losses[n] = logsumexp(logits[n]) - logits[n][targets[n]] (0 for ignored rows).
// Targets must be kIgnoreIndex or in [0, V).
void cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t N, int V);

// Same losses, then logits[n] := grad_scale * (softmax(logits[n]) - onehot(targets[n])),
// and zero for ignored rows. For a mean-reduced loss pass grad_scale = 1 / valid_count.
void cross_entropy_forward_backward(float* losses, float* logits, const int32_t* targets, int64_t N, int V,
                                    float grad_scale);

// The pieces of a cross-entropy whose vocabulary is split across ranks (tensor
// parallelism), where the log-sum-exp of a row is combined from every rank's part:
// lse[n] = logsumexp(logits[n]) over this part of the row.
void logsumexp_rows(float* lse, const float* logits, int64_t N, int V);
// logits[n] := scale * exp(logits[n] - lse[n]) (softmax with a given normaliser),
// and zero for rows whose target is kIgnoreIndex.
void softmax_rows_from_lse(float* logits, const float* lse, const int32_t* targets, int64_t N, int V, float scale);

#define DISTLLM_CROSS_ENTROPY_KERNELS                                                  \
  /* returns log(sum(exp(x))) computed stably */                                       \
  float logsumexp(const float* x, int n);                                               \
  /* x := scale * exp(x - lse) */                                                       \
  void softmax_from_lse(float* x, float lse, float scale, int n);

namespace scalar {
DISTLLM_CROSS_ENTROPY_KERNELS
}
namespace avx2 {
DISTLLM_CROSS_ENTROPY_KERNELS
}

}  // namespace distllm::kernels
