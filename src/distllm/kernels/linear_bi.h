// Batch-invariant linear layer for inference: out[m, n] = dot(x[m, :], W[n, :]) + b[n]
// with W in [N, K] (out, in) layout.
//
// Every output element is reduced in one fixed order (8-lane partial sums over k
// ascending, then a fixed horizontal sum), whatever M is, how rows are grouped
// into tiles, or how many threads run. A sequence therefore gets bit-identical
// logits whether it runs alone, in a batch of 16, in one prefill or in chunks, or
// recomputed after preemption. OpenBLAS does not promise this (its results for a
// row change with M), so serving does not use it.
#pragma once

#include <cstdint>

namespace distllm::kernels {

void linear_bi(float* out, int64_t ldo, const float* x, int64_t ldx, const float* weight, const float* bias, int64_t M,
               int K, int N);

// Tile kernels: rows [0, mr) of x against weight rows [n0, n1), writing
// out[r * ldo + n]. mr <= 3.
#define DISTLLM_LINEAR_BI_KERNELS                                                                     \
  void linear_bi_tile(float* out, int64_t ldo, const float* x, int64_t ldx, const float* weight,    \
                      const float* bias, int mr, int K, int n0, int n1);

namespace scalar {
DISTLLM_LINEAR_BI_KERNELS
}
namespace avx2 {
DISTLLM_LINEAR_BI_KERNELS
}

}  // namespace distllm::kernels
