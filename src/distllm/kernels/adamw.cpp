#include "distllm/kernels/adamw.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "distllm/base/cpu.h"
#include "distllm/base/parallel.h"
#include "distllm/kernels/vec.h"

namespace distllm::kernels {

namespace scalar {

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWStep& s) {
  float bc1 = 1.0f - std::pow(s.beta1, static_cast<float>(s.step));
  float bc2 = 1.0f - std::pow(s.beta2, static_cast<float>(s.step));
  float step_size = s.lr / bc1;
  float bc2_sqrt = std::sqrt(bc2);
  float decay = 1.0f - s.lr * s.weight_decay;
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i];
    m[i] = s.beta1 * m[i] + (1.0f - s.beta1) * g;
    v[i] = s.beta2 * v[i] + (1.0f - s.beta2) * g * g;
    float denom = std::sqrt(v[i]) / bc2_sqrt + s.eps;
    param[i] = param[i] * decay - step_size * m[i] / denom;
  }
}

}  // namespace scalar

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWStep& s) {
  auto fn = use_avx2() ? avx2::adamw_update : scalar::adamw_update;
  constexpr int64_t kChunk = 1 << 15;
  int64_t chunks = (n + kChunk - 1) / kChunk;
  parallel_for(0, chunks, [&](int64_t c) {
    int64_t lo = c * kChunk;
    int64_t len = std::min(n, lo + kChunk) - lo;
    fn(param + lo, grad + lo, m + lo, v + lo, len, s);
  });
}

namespace {

// One buffer's sum of squares, split in fixed chunks so the result does not depend
// on the thread count.
double buffer_sum_of_squares(const float* buffer, int64_t size) {
  constexpr int64_t kChunk = 1 << 16;
  int64_t chunks = (size + kChunk - 1) / kChunk;
  std::vector<double> partial(chunks);
  parallel_for(0, chunks, [&](int64_t c) {
    int64_t lo = c * kChunk;
    partial[c] = sum_squares(buffer + lo, std::min(size, lo + kChunk) - lo);
  });
  double ss = 0.0;
  for (double p : partial) ss += p;
  return ss;
}

}  // namespace

double global_norm(const float* const* buffers, const int64_t* sizes, int count) {
  double total = 0.0;
  for (int b = 0; b < count; ++b) {
    double nrm = std::sqrt(buffer_sum_of_squares(buffers[b], sizes[b]));
    total += nrm * nrm;
  }
  return std::sqrt(total);
}

double sum_of_squares(const float* const* buffers, const int64_t* sizes, int count) {
  double total = 0.0;
  for (int b = 0; b < count; ++b) total += buffer_sum_of_squares(buffers[b], sizes[b]);
  return total;
}

float clip_by_global_norm(float* const* buffers, const int64_t* sizes, int count, double total_norm,
                          double max_norm) {
  double coef = max_norm / (total_norm + 1e-6);
  if (coef >= 1.0) return 1.0f;
  float c = static_cast<float>(coef);
  for (int b = 0; b < count; ++b) {
    constexpr int64_t kChunk = 1 << 16;
    int64_t chunks = (sizes[b] + kChunk - 1) / kChunk;
    parallel_for(0, chunks, [&](int64_t k) {
      int64_t lo = k * kChunk;
      scale(buffers[b] + lo, c, std::min(sizes[b], lo + kChunk) - lo);
    });
  }
  return c;
}

}  // namespace distllm::kernels
