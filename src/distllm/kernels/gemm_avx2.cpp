// AVX2/FMA sgemm micro-kernel: 6 x 16 (12 ymm accumulators; per k two 8-wide loads
// of the B panel and 6 broadcasts of A).
#include <immintrin.h>

#include "distllm/kernels/gemm.h"

namespace distllm::kernels::detail::avx2 {

void gemm_kernel(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, float alpha, float beta) {
  constexpr int MR = kMR;
  __m256 acc0[MR], acc1[MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) acc0[i] = acc1[i] = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256 ai = _mm256_broadcast_ss(a + i);
      acc0[i] = _mm256_fmadd_ps(ai, b0, acc0[i]);
      acc1[i] = _mm256_fmadd_ps(ai, b1, acc1[i]);
    }
    a += MR;
    b += kNR;
  }
  const __m256 va = _mm256_set1_ps(alpha);
  if (beta == 0.0f) {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      _mm256_storeu_ps(c + i * ldc, _mm256_mul_ps(va, acc0[i]));
      _mm256_storeu_ps(c + i * ldc + 8, _mm256_mul_ps(va, acc1[i]));
    }
  } else {
    const __m256 vb = _mm256_set1_ps(beta);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      float* ci = c + i * ldc;
      _mm256_storeu_ps(ci, _mm256_fmadd_ps(va, acc0[i], _mm256_mul_ps(vb, _mm256_loadu_ps(ci))));
      _mm256_storeu_ps(ci + 8, _mm256_fmadd_ps(va, acc1[i], _mm256_mul_ps(vb, _mm256_loadu_ps(ci + 8))));
    }
  }
}

}  // namespace distllm::kernels::detail::avx2
