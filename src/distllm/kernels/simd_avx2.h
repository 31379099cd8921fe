// AVX2/FMA building blocks shared by the *_avx2.cpp kernels. Include only from files
// compiled with -mavx2 -mfma (see DistllmModule.cmake).
#pragma once

#include <immintrin.h>

namespace distllm::kernels::simd {

inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  __m128 sh = _mm_movehdup_ps(lo);
  lo = _mm_add_ps(lo, sh);
  sh = _mm_movehl_ps(sh, lo);
  lo = _mm_add_ss(lo, sh);
  return _mm_cvtss_f32(lo);
}

inline float hmax(__m256 v) {
  __m128 lo = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  lo = _mm_max_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_max_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

inline double hsum_pd(__m256d v) {
  __m128d lo = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_add_sd(lo, _mm_unpackhi_pd(lo, lo)));
}

// Mask selecting the first n (0..8) lanes, for loads/stores of a ragged tail.
inline __m256i tail_mask(int n) {
  static const int table[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(table + 8 - n));
}

// exp(x) for float lanes. x = k*ln2 + r with |r| <= ln2/2, exp(r) by its Taylor series
// to degree 7 (truncation error below 6e-9 relative), then scaled by 2^k through the
// exponent bits. Inputs below -87.3 flush to 0, above 88.7 saturate to +inf.
inline __m256 exp(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.7228f);
  const __m256 lo = _mm256_set1_ps(-87.3365f);
  const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
  const __m256 ln2_hi = _mm256_set1_ps(0.693359375f);
  const __m256 ln2_lo = _mm256_set1_ps(-2.12194440e-4f);
  __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  __m256 overflow = _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
  x = _mm256_max_ps(_mm256_min_ps(x, hi), lo);
  __m256 k = _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // Cody-Waite: subtract k*ln2 in two parts so r keeps full precision.
  __m256 r = _mm256_fnmadd_ps(k, ln2_hi, x);
  r = _mm256_fnmadd_ps(k, ln2_lo, r);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  // 2^k: k is in [-126, 128]; split as 2^(k/2) * 2^(k - k/2) so k = 128 cannot
  // overflow the exponent field.
  __m256i ki = _mm256_cvtps_epi32(k);
  __m256i k1 = _mm256_srai_epi32(ki, 1);
  __m256i k2 = _mm256_sub_epi32(ki, k1);
  __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, _mm256_set1_epi32(127)), 23));
  __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, _mm256_set1_epi32(127)), 23));
  __m256 result = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  result = _mm256_andnot_ps(underflow, result);
  return _mm256_blendv_ps(result, _mm256_set1_ps(__builtin_inff()), overflow);
}

// tanh(x) = 1 - 2 / (exp(2x) + 1); saturates correctly at both ends. For tiny |x|
// this form loses relative accuracy, so below 0.004 use x - x^3/3 instead.
inline __m256 tanh(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  __m256 e = exp(_mm256_add_ps(x, x));
  __m256 t = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
  __m256 ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  __m256 small = _mm256_cmp_ps(ax, _mm256_set1_ps(0.004f), _CMP_LT_OQ);
  __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
  __m256 series = _mm256_fnmadd_ps(x3, _mm256_set1_ps(1.0f / 3.0f), x);
  return _mm256_blendv_ps(t, series, small);
}

}  // namespace distllm::kernels::simd
