#include "distllm/kernels/cross_entropy.h"

#include <cmath>
#include <cstring>

#include "distllm/base/cpu.h"
#include "distllm/base/parallel.h"

namespace distllm::kernels {

namespace scalar {

float logsumexp(const float* x, int n) {
  float m = x[0];
  for (int i = 1; i < n; ++i) m = x[i] > m ? x[i] : m;
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += std::exp(x[i] - m);
  return m + std::log(s);
}

void softmax_from_lse(float* x, float lse, float scale, int n) {
  for (int i = 0; i < n; ++i) x[i] = scale * std::exp(x[i] - lse);
}

}  // namespace scalar

void cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t N, int V) {
  auto lse_fn = use_avx2() ? avx2::logsumexp : scalar::logsumexp;
  parallel_for(0, N, [&](int64_t n) {
    if (targets[n] == kIgnoreIndex) {
      losses[n] = 0.0f;
      return;
    }
    const float* row = logits + n * V;
    losses[n] = lse_fn(row, V) - row[targets[n]];
  });
}

void cross_entropy_forward_backward(float* losses, float* logits, const int32_t* targets, int64_t N, int V,
                                    float grad_scale) {
  bool simd = use_avx2();
  parallel_for(0, N, [&](int64_t n) {
    float* row = logits + n * V;
    if (targets[n] == kIgnoreIndex) {
      losses[n] = 0.0f;
      std::memset(row, 0, sizeof(float) * V);
      return;
    }
    float lse = (simd ? avx2::logsumexp : scalar::logsumexp)(row, V);
    losses[n] = lse - row[targets[n]];
    (simd ? avx2::softmax_from_lse : scalar::softmax_from_lse)(row, lse, grad_scale, V);
    row[targets[n]] -= grad_scale;
  });
}

void logsumexp_rows(float* lse, const float* logits, int64_t N, int V) {
  auto lse_fn = use_avx2() ? avx2::logsumexp : scalar::logsumexp;
  parallel_for(0, N, [&](int64_t n) { lse[n] = lse_fn(logits + n * V, V); });
}

void softmax_rows_from_lse(float* logits, const float* lse, const int32_t* targets, int64_t N, int V, float scale) {
  auto softmax_fn = use_avx2() ? avx2::softmax_from_lse : scalar::softmax_from_lse;
  parallel_for(0, N, [&](int64_t n) {
    float* row = logits + n * V;
    if (targets[n] == kIgnoreIndex)
      std::memset(row, 0, sizeof(float) * V);
    else
      softmax_fn(row, lse[n], scale, V);
  });
}

}  // namespace distllm::kernels
