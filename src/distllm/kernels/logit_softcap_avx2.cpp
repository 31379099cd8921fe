#include "distllm/kernels/logit_softcap.h"
#include "distllm/kernels/simd_avx2.h"

namespace distllm::kernels::avx2 {

namespace {

template <typename F>
inline void each8(int64_t n, F&& f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) f(i, _mm256_set1_epi32(-1));
  if (i < n) f(i, simd::tail_mask(static_cast<int>(n - i)));
}

}  // namespace

void logit_softcap_forward(float* x, int64_t n, float cap) {
  const __m256 vcap = _mm256_set1_ps(cap), inv = _mm256_set1_ps(1.0f / cap);
  each8(n, [&](int64_t i, __m256i m) {
    __m256 v = _mm256_maskload_ps(x + i, m);
    _mm256_maskstore_ps(x + i, m, _mm256_mul_ps(vcap, simd::tanh(_mm256_mul_ps(v, inv))));
  });
}

void logit_softcap_backward(float* d, const float* capped, int64_t n, float cap) {
  const __m256 inv = _mm256_set1_ps(1.0f / cap), one = _mm256_set1_ps(1.0f);
  each8(n, [&](int64_t i, __m256i m) {
    __m256 t = _mm256_mul_ps(_mm256_maskload_ps(capped + i, m), inv);
    __m256 g = _mm256_fnmadd_ps(t, t, one);
    _mm256_maskstore_ps(d + i, m, _mm256_mul_ps(_mm256_maskload_ps(d + i, m), g));
  });
}

}  // namespace distllm::kernels::avx2
