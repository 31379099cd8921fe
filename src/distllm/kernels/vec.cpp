#include "distllm/kernels/vec.h"

#include <cmath>

#include "distllm/base/cpu.h"

namespace distllm::kernels {

namespace scalar {

float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

void axpy(float* y, float alpha, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void scale(float* x, float alpha, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= alpha;
}

void add(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

double sum_squares(const float* x, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

float max_value(const float* x, int64_t n) {
  float m = x[0];
  for (int64_t i = 1; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

float softmax_inplace(float* x, int64_t n) {
  float m = max_value(x, n);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    sum += x[i];
  }
  float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
  return m + std::log(sum);
}

}  // namespace scalar

#define DISPATCH(fn, ...) (use_avx2() ? avx2::fn(__VA_ARGS__) : scalar::fn(__VA_ARGS__))

float dot(const float* a, const float* b, int64_t n) { return DISPATCH(dot, a, b, n); }
void axpy(float* y, float alpha, const float* x, int64_t n) { DISPATCH(axpy, y, alpha, x, n); }
void scale(float* x, float alpha, int64_t n) { DISPATCH(scale, x, alpha, n); }
void add(float* out, const float* a, const float* b, int64_t n) { DISPATCH(add, out, a, b, n); }
void add_inplace(float* y, const float* x, int64_t n) { DISPATCH(add_inplace, y, x, n); }
double sum_squares(const float* x, int64_t n) { return DISPATCH(sum_squares, x, n); }
float max_value(const float* x, int64_t n) { return DISPATCH(max_value, x, n); }
float softmax_inplace(float* x, int64_t n) { return DISPATCH(softmax_inplace, x, n); }

#undef DISPATCH

}  // namespace distllm::kernels
