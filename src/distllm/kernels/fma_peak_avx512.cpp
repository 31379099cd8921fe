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

// Same chains on vdpbf16ps. Inputs near 1 keep the accumulators finite (each step
// adds 2 x 1e-3 x 1e-3).
float bf16_dot_loop_avx512(long iters) {
  __m512 acc[kFmaChains];
  for (int i = 0; i < kFmaChains; ++i) acc[i] = _mm512_set1_ps(1.0f + 0.001f * static_cast<float>(i));
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f)), b = a;
  for (long it = 0; it < iters; ++it)
    for (int i = 0; i < kFmaChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  __m512 s = acc[0];
  for (int i = 1; i < kFmaChains; ++i) s = _mm512_add_ps(s, acc[i]);
  alignas(64) float out[16];
  _mm512_store_ps(out, s);
  return out[0] + out[15];
}

}  // namespace distllm::kernels::detail
