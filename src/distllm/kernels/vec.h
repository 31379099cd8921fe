// Vector primitives used across kernels (and by decode-time matrix-vector code).
// Each public function dispatches at run time to the AVX2 version or the scalar
// reference; both are exported for the equivalence tests.
#pragma once

#include <cstdint>

namespace distllm::kernels {

float dot(const float* a, const float* b, int64_t n);
void axpy(float* y, float alpha, const float* x, int64_t n);  // y += alpha * x
void scale(float* x, float alpha, int64_t n);                  // x *= alpha
void add(float* out, const float* a, const float* b, int64_t n);
void add_inplace(float* y, const float* x, int64_t n);          // y += x
double sum_squares(const float* x, int64_t n);                  // in double
float max_value(const float* x, int64_t n);                     // n >= 1
// x = softmax(x) in place; returns log(sum(exp(x - max))) + max (the log-sum-exp).
float softmax_inplace(float* x, int64_t n);

namespace scalar {
float dot(const float* a, const float* b, int64_t n);
void axpy(float* y, float alpha, const float* x, int64_t n);
void scale(float* x, float alpha, int64_t n);
void add(float* out, const float* a, const float* b, int64_t n);
void add_inplace(float* y, const float* x, int64_t n);
double sum_squares(const float* x, int64_t n);
float max_value(const float* x, int64_t n);
float softmax_inplace(float* x, int64_t n);
}  // namespace scalar

namespace avx2 {
float dot(const float* a, const float* b, int64_t n);
void axpy(float* y, float alpha, const float* x, int64_t n);
void scale(float* x, float alpha, int64_t n);
void add(float* out, const float* a, const float* b, int64_t n);
void add_inplace(float* y, const float* x, int64_t n);
double sum_squares(const float* x, int64_t n);
float max_value(const float* x, int64_t n);
float softmax_inplace(float* x, int64_t n);
// x = exp(x - mx) in place; returns the sum of the new values (softmax's
// numerators and denominator, for callers that apply the normaliser later).
float exp_minus_max_inplace(float* x, int64_t n, float mx);
// exp of each element (exposed to test the polynomial against std::exp).
void exp_inplace(float* x, int64_t n);
void tanh_inplace(float* x, int64_t n);
}  // namespace avx2

}  // namespace distllm::kernels
