#include <cmath>

#include "distllm/kernels/cross_entropy.h"
#include "distllm/kernels/simd_avx2.h"
#include "distllm/kernels/vec.h"

namespace distllm::kernels::avx2 {

float logsumexp(const float* x, int n) {
  float m = max_value(x, n);
  __m256 vm = _mm256_set1_ps(m);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_add_ps(acc0, simd::exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm)));
    acc1 = _mm256_add_ps(acc1, simd::exp(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vm)));
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_add_ps(acc0, simd::exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm)));
  if (i < n) {
    __m256i mask = simd::tail_mask(n - i);
    __m256 e = simd::exp(_mm256_sub_ps(_mm256_maskload_ps(x + i, mask), vm));
    acc1 = _mm256_add_ps(acc1, _mm256_and_ps(e, _mm256_castsi256_ps(mask)));
  }
  return m + std::log(simd::hsum(_mm256_add_ps(acc0, acc1)));
}

void softmax_from_lse(float* x, float lse, float scale, int n) {
  __m256 vl = _mm256_set1_ps(lse), vs = _mm256_set1_ps(scale);
  int i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(x + i, _mm256_mul_ps(vs, simd::exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), vl))));
  if (i < n) {
    __m256i mask = simd::tail_mask(n - i);
    _mm256_maskstore_ps(x + i, mask, _mm256_mul_ps(vs, simd::exp(_mm256_sub_ps(_mm256_maskload_ps(x + i, mask), vl))));
  }
}

}  // namespace distllm::kernels::avx2
