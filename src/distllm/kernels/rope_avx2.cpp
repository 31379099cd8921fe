#include "distllm/kernels/rope.h"
#include "distllm/kernels/simd_avx2.h"

namespace distllm::kernels::avx2 {

void rope_head(float* x, const float* cos, const float* sin, int half, bool inverse) {
  const __m256 sign = _mm256_set1_ps(inverse ? -1.0f : 1.0f);
  int i = 0;
  auto step = [&](int off, __m256i m) {
    __m256 x1 = _mm256_maskload_ps(x + off, m);
    __m256 x2 = _mm256_maskload_ps(x + off + half, m);
    __m256 c = _mm256_maskload_ps(cos + off, m);
    __m256 s = _mm256_mul_ps(sign, _mm256_maskload_ps(sin + off, m));
    _mm256_maskstore_ps(x + off, m, _mm256_fnmadd_ps(x2, s, _mm256_mul_ps(x1, c)));
    _mm256_maskstore_ps(x + off + half, m, _mm256_fmadd_ps(x1, s, _mm256_mul_ps(x2, c)));
  };
  for (; i + 8 <= half; i += 8) step(i, _mm256_set1_epi32(-1));
  if (i < half) step(i, simd::tail_mask(half - i));
}

}  // namespace distllm::kernels::avx2
