#include "distllm/model/block_ops.h"

#include "distllm/kernels/activation.h"
#include "distllm/kernels/norm.h"

namespace distllm {

using namespace kernels;

void block_norm_forward(NormKind kind, float* out, float* mean, float* rstd, const float* in, const float* weight,
                        const float* bias, int64_t rows, int C, float eps) {
  switch (kind) {
    case NormKind::kLayerNorm: layernorm_forward(out, mean, rstd, in, weight, bias, rows, C, eps); return;
    case NormKind::kRmsNorm: rmsnorm_forward(out, rstd, in, weight, rows, C, eps); return;
    case NormKind::kRmsNormPlusOne: rmsnorm_plus_one_forward(out, rstd, in, weight, rows, C, eps); return;
  }
}

void block_norm_backward(NormKind kind, float* din, float* dweight, float* dbias, const float* dout, const float* in,
                         const float* weight, const float* mean, const float* rstd, int64_t rows, int C) {
  switch (kind) {
    case NormKind::kLayerNorm: layernorm_backward(din, dweight, dbias, dout, in, weight, mean, rstd, rows, C); return;
    case NormKind::kRmsNorm: rmsnorm_backward(din, dweight, dout, in, weight, rstd, rows, C); return;
    case NormKind::kRmsNormPlusOne: rmsnorm_plus_one_backward(din, dweight, dout, in, weight, rstd, rows, C); return;
  }
}

void mlp_activation_forward(MlpKind kind, float* act, const float* in, int64_t rows, int I) {
  switch (kind) {
    case MlpKind::kGeluTanh: gelu_forward(act, in, rows * I); return;
    case MlpKind::kSwiGlu: swiglu_forward(act, in, rows, I); return;
    case MlpKind::kGeGluTanh: geglu_forward(act, in, rows, I); return;
  }
}

void mlp_activation_backward(MlpKind kind, float* din, const float* in, const float* dact, int64_t rows, int I) {
  switch (kind) {
    case MlpKind::kGeluTanh: gelu_backward(din, in, dact, rows * I); return;
    case MlpKind::kSwiGlu: swiglu_backward(din, in, dact, rows, I); return;
    case MlpKind::kGeGluTanh: geglu_backward(din, in, dact, rows, I); return;
  }
}

}  // namespace distllm
