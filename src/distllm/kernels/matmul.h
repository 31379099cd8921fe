// Matrix multiply for linear layers, forward and backward.
//
// Weights come in the two layouts Hugging Face checkpoints use:
//   kInOut: W is [K, N] (in, out)  -- GPT-2's Conv1D
//   kOutIn: W is [N, K] (out, in)  -- torch.nn.Linear (Llama)
// Large products go to OpenBLAS sgemm; small row counts (decode) use a hand-written
// matrix-vector kernel that streams each weight row once.
#pragma once

#include <cstdint>

namespace distllm::kernels {

enum class WeightLayout { kInOut, kOutIn };

// out[M, N] = inp[M, K] · W + bias. Row strides: ldi for inp, ldo for out (0 = dense).
// accumulate=true adds into out instead of overwriting (bias is then not added).
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t M, int K,
                    int N, WeightLayout layout, int64_t ldi = 0, int64_t ldo = 0, bool accumulate = false);

// dinp[M, K] (=, or += when accumulate) dout[M, N] · W^T.
void matmul_backward_input(float* dinp, const float* dout, const float* weight, int64_t M, int K, int N,
                           WeightLayout layout, int64_t ld_dout = 0, int64_t ld_dinp = 0, bool accumulate = false);

// dweight += inp^T · dout (in the weight's own layout); dbias[n] += sum_m dout[m, n].
// Either output may be null.
void matmul_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, int64_t M, int K,
                            int N, WeightLayout layout, int64_t ld_dout = 0, int64_t ld_inp = 0);

// Below this many rows, kOutIn products take the matrix-vector path.
constexpr int64_t kMatvecMaxRows = 8;

#define DISTLLM_MATVEC_KERNELS                                                                  \
  /* out[m, n - n0] = dot(inp[m, :], W[n, :]) (+ bias[n]) for m < M <= 4, n in [n0, n1); W is [N, K] */ \
  void matvec_rows(float* out, int64_t ldo, const float* inp, int64_t ldi, const float* weight, \
                   const float* bias, int M, int K, int n0, int n1);

namespace scalar {
DISTLLM_MATVEC_KERNELS
}
namespace avx2 {
DISTLLM_MATVEC_KERNELS
}

}  // namespace distllm::kernels
