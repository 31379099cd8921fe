#include <immintrin.h>

#include "distllm/kernels/fma_peak.h"

namespace distllm::kernels::detail {

float fma_loop_avx512(long iters) {
  __m512 acc[kFmaChains];
  for (int i = 0; i < kFmaChains; ++i) acc[i] = _mm512_set1_ps(1.0f + 0.001f * static_cast<float>(i));
  const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (long it = 0; it < iters; ++it)
    for (int i = 0; i < kFmaChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], b, c);
  __m512 s = acc[0];
  for (int i = 1; i < kFmaChains; ++i) s = _mm512_add_ps(s, acc[i]);
  alignas(64) float out[16];
  _mm512_store_ps(out, s);  // not _mm512_reduce_add_ps: g++ 12 warns inside it
  return out[0] + out[15];
}

}  // namespace distllm::kernels::detail
