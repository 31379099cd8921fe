#include <immintrin.h>

#include "distllm/kernels/fma_peak.h"

namespace distllm::kernels::detail {

namespace {

// kFmaChains independent chains acc = step(acc), summed at the end.
template <typename Step>
float chains(long iters, Step step) {
  __m512 acc[kFmaChains];
  for (int i = 0; i < kFmaChains; ++i) acc[i] = _mm512_set1_ps(1.0f + 0.001f * static_cast<float>(i));
  for (long it = 0; it < iters; ++it)
    for (int i = 0; i < kFmaChains; ++i) acc[i] = step(acc[i]);
  __m512 s = acc[0];
  for (int i = 1; i < kFmaChains; ++i) s = _mm512_add_ps(s, acc[i]);
  alignas(64) float out[16];
  _mm512_store_ps(out, s);  // not _mm512_reduce_add_ps: g++ 12 warns inside it
  return out[0] + out[15];
}

}  // namespace

float fma_loop_avx512(long iters) {
  const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  return chains(iters, [&](__m512 acc) { return _mm512_fmadd_ps(acc, b, c); });
}

// Inputs of 1e-3 keep the accumulators finite (each step adds 2 x 1e-6).
float bf16_dot_loop_avx512(long iters) {
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
  return chains(iters, [&](__m512 acc) { return _mm512_dpbf16_ps(acc, a, a); });
}

}  // namespace distllm::kernels::detail
