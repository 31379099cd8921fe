#include "distllm/kernels/logit_softcap.h"

#include <algorithm>
#include <cmath>

#include "distllm/base/cpu.h"
#include "distllm/base/parallel.h"

namespace distllm::kernels {

namespace scalar {

void logit_softcap_forward(float* x, int64_t n, float cap) {
  const float inv = 1.0f / cap;
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] * inv);
}

void logit_softcap_backward(float* d, const float* capped, int64_t n, float cap) {
  const float inv = 1.0f / cap;
  for (int64_t i = 0; i < n; ++i) {
    const float t = capped[i] * inv;
    d[i] *= 1.0f - t * t;
  }
}

}  // namespace scalar

namespace {

template <typename Fn>
void chunked(int64_t n, Fn&& fn) {
  constexpr int64_t kChunk = 16384;
  parallel_for(0, (n + kChunk - 1) / kChunk, [&](int64_t c) {
    const int64_t lo = c * kChunk;
    fn(lo, std::min(n, lo + kChunk) - lo);
  });
}

}  // namespace

void logit_softcap_forward(float* x, int64_t n, float cap) {
  const bool simd = use_avx2();
  chunked(n, [&](int64_t lo, int64_t len) {
    (simd ? avx2::logit_softcap_forward : scalar::logit_softcap_forward)(x + lo, len, cap);
  });
}

void logit_softcap_backward(float* d, const float* capped, int64_t n, float cap) {
  const bool simd = use_avx2();
  chunked(n, [&](int64_t lo, int64_t len) {
    (simd ? avx2::logit_softcap_backward : scalar::logit_softcap_backward)(d + lo, capped + lo, len, cap);
  });
}

}  // namespace distllm::kernels
