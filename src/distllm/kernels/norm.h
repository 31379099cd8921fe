// LayerNorm (GPT-2) and RMSNorm (Llama; Gemma's scaled by 1 + w), forward and
// backward, over N rows of C.
// Backward accumulates (+=) into dinp, dweight and dbias so residual-stream and
// micro-batch gradients add up without extra passes.
#pragma once

#include <cstdint>

namespace distllm::kernels {

// mean and rstd (1/sqrt(var + eps)) per row are saved for backward; pass null at
// inference time.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int C, float eps);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int C);

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int C,
                     float eps);
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int64_t N, int C);

// Gemma's RMSNorm: out = x * rstd * (1 + w). The stored weight is the offset from
// the identity (a zero weight passes the normalised row through), as Hugging Face
// keeps it; d(weight) is the same as the plain norm's.
void rmsnorm_plus_one_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int C,
                              float eps);
void rmsnorm_plus_one_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                               const float* weight, const float* rstd, int64_t N, int C);

// RMSNorm of every head: `heads` consecutive D-wide slices of each of `rows` rows
// (row stride `stride` floats), in place, one weight vector [D] shared by the heads
// (Qwen3's q/k norms). With `saved` (rows * heads * D) the inputs are kept there
// for backward, with `rstd` (rows * heads) their reciprocal RMS; both may be null.
void head_rmsnorm_forward(float* x, int64_t rows, int64_t stride, int heads, int D, const float* weight, float eps,
                          float* saved, float* rstd);
// `d` holds d(out) on entry and d(in) on exit (same strides); dweight += the
// weight's gradient (null: not wanted), in a fixed order for any thread count.
void head_rmsnorm_backward(float* d, int64_t rows, int64_t stride, int heads, int D, const float* weight,
                           const float* saved, const float* rstd, float* dweight);

// One-row building blocks; the public functions above parallelise over them.
#define DISTLLM_NORM_ROW_KERNELS                                                                    \
  void layernorm_row(float* out, float* mean, float* rstd, const float* x, const float* w,          \
                     const float* b, int C, float eps);                                             \
  void layernorm_backward_row(float* dx, const float* dout, const float* x, const float* w,         \
                              float mean, float rstd, int C);                                       \
  /* dw[c] += dout[c] * (x[c] - mean) * rstd, db[c] += dout[c], for c in [0, n) */                 \
  void layernorm_param_grad_row(float* dw, float* db, const float* dout, const float* x, float mean, \
                                float rstd, int n);                                                 \
  void rmsnorm_row(float* out, float* rstd, const float* x, const float* w, int C, float eps);      \
  void rmsnorm_backward_row(float* dx, const float* dout, const float* x, const float* w, float rstd, \
                            int C);                                                                 \
  /* the same with the weight 1 + w */                                                              \
  void rmsnorm_plus_one_row(float* out, float* rstd, const float* x, const float* w, int C, float eps); \
  void rmsnorm_plus_one_backward_row(float* dx, const float* dout, const float* x, const float* w,  \
                                     float rstd, int C);                                            \
  /* dw[c] += dout[c] * x[c] * rstd */                                                              \
  void rmsnorm_param_grad_row(float* dw, const float* dout, const float* x, float rstd, int n);

namespace scalar {
DISTLLM_NORM_ROW_KERNELS
}
namespace avx2 {
DISTLLM_NORM_ROW_KERNELS
}

}  // namespace distllm::kernels
