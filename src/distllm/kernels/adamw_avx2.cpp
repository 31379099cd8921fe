#include <cmath>

#include "distllm/kernels/adamw.h"
#include "distllm/kernels/simd_avx2.h"

namespace distllm::kernels::avx2 {

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWStep& s) {
  float bc1 = 1.0f - std::pow(s.beta1, static_cast<float>(s.step));
  float bc2 = 1.0f - std::pow(s.beta2, static_cast<float>(s.step));
  const __m256 b1 = _mm256_set1_ps(s.beta1), b2 = _mm256_set1_ps(s.beta2);
  const __m256 one_b1 = _mm256_set1_ps(1.0f - s.beta1), one_b2 = _mm256_set1_ps(1.0f - s.beta2);
  const __m256 step_size = _mm256_set1_ps(s.lr / bc1);
  const __m256 bc2_sqrt = _mm256_set1_ps(std::sqrt(bc2));
  const __m256 eps = _mm256_set1_ps(s.eps);
  const __m256 decay = _mm256_set1_ps(1.0f - s.lr * s.weight_decay);
  auto step = [&](int64_t i, __m256i mask) {
    __m256 g = _mm256_maskload_ps(grad + i, mask);
    __m256 mi = _mm256_fmadd_ps(b1, _mm256_maskload_ps(m + i, mask), _mm256_mul_ps(one_b1, g));
    __m256 vi = _mm256_fmadd_ps(b2, _mm256_maskload_ps(v + i, mask), _mm256_mul_ps(one_b2, _mm256_mul_ps(g, g)));
    __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2_sqrt), eps);
    __m256 p = _mm256_mul_ps(_mm256_maskload_ps(param + i, mask), decay);
    p = _mm256_sub_ps(p, _mm256_div_ps(_mm256_mul_ps(step_size, mi), denom));
    _mm256_maskstore_ps(m + i, mask, mi);
    _mm256_maskstore_ps(v + i, mask, vi);
    _mm256_maskstore_ps(param + i, mask, p);
  };
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) step(i, _mm256_set1_epi32(-1));
  if (i < n) step(i, simd::tail_mask(static_cast<int>(n - i)));
}

}  // namespace distllm::kernels::avx2
