#include <cmath>

#include "distllm/kernels/simd_avx2.h"
#include "distllm/kernels/vec.h"

namespace distllm::kernels::avx2 {

float dot(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), acc2);
    acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), acc3);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  if (i < n) {
    __m256i m = simd::tail_mask(static_cast<int>(n - i));
    acc1 = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m), acc1);
  }
  return simd::hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
}

void axpy(float* y, float alpha, const float* x, int64_t n) {
  __m256 a = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(a, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += alpha * x[i];
}

void scale(float* x, float alpha, int64_t n) {
  __m256 a = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(a, _mm256_loadu_ps(x + i)));
  for (; i < n; ++i) x[i] *= alpha;
}

void add(float* out, const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  for (; i < n; ++i) out[i] = a[i] + b[i];
}

void add_inplace(float* y, const float* x, int64_t n) { add(y, y, x, n); }

double sum_squares(const float* x, int64_t n) {
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    acc0 = _mm256_fmadd_pd(lo, lo, acc0);
    acc1 = _mm256_fmadd_pd(hi, hi, acc1);
  }
  double s = simd::hsum_pd(_mm256_add_pd(acc0, acc1));
  for (; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

float max_value(const float* x, int64_t n) {
  if (n < 8) {
    float m = x[0];
    for (int64_t i = 1; i < n; ++i) m = x[i] > m ? x[i] : m;
    return m;
  }
  __m256 m = _mm256_loadu_ps(x);
  int64_t i = 8;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
  float r = simd::hmax(m);
  for (; i < n; ++i) r = x[i] > r ? x[i] : r;
  return r;
}

float exp_minus_max_inplace(float* x, int64_t n, float mx) {
  __m256 vmax = _mm256_set1_ps(mx);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 e = simd::exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmax));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  if (i < n) {
    __m256i m = simd::tail_mask(static_cast<int>(n - i));
    __m256 e = simd::exp(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), vmax));
    e = _mm256_and_ps(e, _mm256_castsi256_ps(m));
    _mm256_maskstore_ps(x + i, m, e);
    acc = _mm256_add_ps(acc, e);
  }
  return simd::hsum(acc);
}

float softmax_inplace(float* x, int64_t n) {
  float mx = max_value(x, n);
  float sum = exp_minus_max_inplace(x, n, mx);
  scale(x, 1.0f / sum, n);
  return mx + std::log(sum);
}

void exp_inplace(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, simd::exp(_mm256_loadu_ps(x + i)));
  if (i < n) {
    __m256i m = simd::tail_mask(static_cast<int>(n - i));
    _mm256_maskstore_ps(x + i, m, simd::exp(_mm256_maskload_ps(x + i, m)));
  }
}

void tanh_inplace(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, simd::tanh(_mm256_loadu_ps(x + i)));
  if (i < n) {
    __m256i m = simd::tail_mask(static_cast<int>(n - i));
    _mm256_maskstore_ps(x + i, m, simd::tanh(_mm256_maskload_ps(x + i, m)));
  }
}

}  // namespace distllm::kernels::avx2
