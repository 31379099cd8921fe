#include <immintrin.h>

#include "distllm/kernels/fma_peak.h"

namespace distllm::kernels::detail {

float fma_loop_avx2(long iters) {
  __m256 acc[kFmaChains];
  for (int i = 0; i < kFmaChains; ++i) acc[i] = _mm256_set1_ps(1.0f + 0.001f * static_cast<float>(i));
  const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (long it = 0; it < iters; ++it)
    for (int i = 0; i < kFmaChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], b, c);
  __m256 s = acc[0];
  for (int i = 1; i < kFmaChains; ++i) s = _mm256_add_ps(s, acc[i]);
  alignas(32) float out[8];
  _mm256_store_ps(out, s);
  return out[0] + out[7];
}

}  // namespace distllm::kernels::detail
