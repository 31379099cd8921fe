#include "distllm/kernels/matmul.h"
#include "distllm/kernels/simd_avx2.h"

namespace distllm::kernels::avx2 {

// For each weight row (one output feature), dot it with up to four input rows in a
// single pass, so each weight byte is loaded from memory once per call: decode is
// bound by weight bandwidth, not arithmetic.
void matvec_rows(float* out, int64_t ldo, const float* inp, int64_t ldi, const float* weight, const float* bias,
                 int M, int K, int n0, int n1) {
  const int k8 = K & ~7;
  const __m256i tail = simd::tail_mask(K - k8);
  const float* x0 = inp;
  const float* x1 = inp + (M > 1 ? ldi : 0);
  const float* x2 = inp + (M > 2 ? 2 * ldi : 0);
  const float* x3 = inp + (M > 3 ? 3 * ldi : 0);
  for (int n = n0; n < n1; ++n) {
    const float* w = weight + static_cast<int64_t>(n) * K;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    if (M == 1) {
      // Two independent chains hide the FMA latency when only one row is active.
      for (int k = 0; k + 16 <= k8; k += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k), _mm256_loadu_ps(x0 + k), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k + 8), _mm256_loadu_ps(x0 + k + 8), a1);
      }
      if (k8 % 16) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k8 - 8), _mm256_loadu_ps(x0 + k8 - 8), a0);
      if (k8 < K) a0 = _mm256_fmadd_ps(_mm256_maskload_ps(w + k8, tail), _mm256_maskload_ps(x0 + k8, tail), a0);
      out[n - n0] = simd::hsum(_mm256_add_ps(a0, a1)) + (bias ? bias[n] : 0.0f);
      continue;
    }
    for (int k = 0; k < k8; k += 8) {
      __m256 wv = _mm256_loadu_ps(w + k);
      a0 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x0 + k), a0);
      a1 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x1 + k), a1);
      a2 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x2 + k), a2);
      a3 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x3 + k), a3);
    }
    if (k8 < K) {
      __m256 wv = _mm256_maskload_ps(w + k8, tail);
      a0 = _mm256_fmadd_ps(wv, _mm256_maskload_ps(x0 + k8, tail), a0);
      a1 = _mm256_fmadd_ps(wv, _mm256_maskload_ps(x1 + k8, tail), a1);
      a2 = _mm256_fmadd_ps(wv, _mm256_maskload_ps(x2 + k8, tail), a2);
      a3 = _mm256_fmadd_ps(wv, _mm256_maskload_ps(x3 + k8, tail), a3);
    }
    float b = bias ? bias[n] : 0.0f;
    float r[4] = {simd::hsum(a0), simd::hsum(a1), simd::hsum(a2), simd::hsum(a3)};
    for (int m = 0; m < M; ++m) out[m * ldo + (n - n0)] = r[m] + b;
  }
}

}  // namespace distllm::kernels::avx2
