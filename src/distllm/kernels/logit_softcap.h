// Soft-capping of output logits (Gemma 2's final_logit_softcapping): y = cap * tanh(x / cap)
// bounds every logit to (-cap, cap) smoothly. A separate elementwise pass between the
// LM head's matmul and the cross-entropy (training) or the sampler (inference), so the
// cross-entropy kernels stay one kernel for every family.
#pragma once

#include <cstdint>

namespace distllm::kernels {

// x [n] in place: x -> cap * tanh(x / cap).
void logit_softcap_forward(float* x, int64_t n, float cap);
// d [n] in place: d(capped) -> d(raw), from the capped values y the forward wrote
// (dy/dx = 1 - (y / cap)^2).
void logit_softcap_backward(float* d, const float* capped, int64_t n, float cap);

#define DISTLLM_LOGIT_SOFTCAP_KERNELS                                     \
  void logit_softcap_forward(float* x, int64_t n, float cap);             \
  void logit_softcap_backward(float* d, const float* capped, int64_t n, float cap);

namespace scalar {
DISTLLM_LOGIT_SOFTCAP_KERNELS
}
namespace avx2 {
DISTLLM_LOGIT_SOFTCAP_KERNELS
}

}  // namespace distllm::kernels
