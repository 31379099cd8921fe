// AdamW (decoupled weight decay, bias-corrected moments) and global-norm clipping,
// with PyTorch's arithmetic:
//   p -= lr * wd * p
//   m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2
//   p -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps)
#pragma once

#include <cstdint>

namespace distllm::kernels {

struct AdamWStep {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;  // 1-based, for bias correction
};

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWStep& s);

#define DISTLLM_ADAMW_KERNELS \
  void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWStep& s);

namespace scalar {
DISTLLM_ADAMW_KERNELS
}
namespace avx2 {
DISTLLM_ADAMW_KERNELS
}

// Global L2 norm of the concatenation of several buffers, computed as
// torch.nn.utils.clip_grad_norm_ does (the norm of the per-buffer norms), in double.
double global_norm(const float* const* buffers, const int64_t* sizes, int count);
// Sum of squares of every element of the buffers, in double (the shards of one
// gradient add up, and the global norm is the square root of the sum over ranks).
double sum_of_squares(const float* const* buffers, const int64_t* sizes, int count);
// Scales every buffer by min(1, max_norm / (total_norm + 1e-6)); returns that factor.
float clip_by_global_norm(float* const* buffers, const int64_t* sizes, int count, double total_norm,
                          double max_norm);

}  // namespace distllm::kernels
