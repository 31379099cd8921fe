#include "distllm/kernels/activation.h"

#include <algorithm>
#include <cmath>

#include "distllm/base/cpu.h"
#include "distllm/base/parallel.h"

namespace distllm::kernels {

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoeff = 0.044715f;
}  // namespace

namespace scalar {

namespace {

inline float gelu(float x) {
  float u = kSqrt2OverPi * (x + kGeluCoeff * x * x * x);
  return 0.5f * x * (1.0f + std::tanh(u));
}

inline float gelu_grad(float x) {
  float u = kSqrt2OverPi * (x + kGeluCoeff * x * x * x);
  float t = std::tanh(u);
  float sech2 = 1.0f - t * t;
  float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * sech2 * du;
}

}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gelu(inp[i]);
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dinp[i] = dout[i] * gelu_grad(inp[i]);
}

void geglu_row(float* out, const float* gate, const float* up, int n) {
  for (int i = 0; i < n; ++i) out[i] = gelu(gate[i]) * up[i];
}

void geglu_backward_row(float* dgate, float* dup, const float* gate, const float* up, const float* dout, int n) {
  for (int i = 0; i < n; ++i) {
    const float g = gate[i], d = dout[i];
    dup[i] = d * gelu(g);
    dgate[i] = d * up[i] * gelu_grad(g);
  }
}

void swiglu_row(float* out, const float* gate, const float* up, int n) {
  for (int i = 0; i < n; ++i) {
    float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void swiglu_backward_row(float* dgate, float* dup, const float* gate, const float* up, const float* dout, int n) {
  for (int i = 0; i < n; ++i) {
    float g = gate[i];
    float sig = 1.0f / (1.0f + std::exp(-g));
    float silu = g * sig;
    dup[i] = dout[i] * silu;
    dgate[i] = dout[i] * up[i] * sig * (1.0f + g * (1.0f - sig));
  }
}

}  // namespace scalar

namespace {

// Elementwise work is split into cache-friendly chunks across threads.
template <typename Fn>
void chunked(int64_t n, Fn&& fn) {
  constexpr int64_t kChunk = 16384;
  int64_t chunks = (n + kChunk - 1) / kChunk;
  parallel_for(0, chunks, [&](int64_t c) {
    int64_t lo = c * kChunk;
    fn(lo, std::min(n, lo + kChunk) - lo);
  });
}

}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n) {
  bool simd = use_avx2();
  chunked(n, [&](int64_t lo, int64_t len) {
    (simd ? avx2::gelu_forward : scalar::gelu_forward)(out + lo, inp + lo, len);
  });
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  bool simd = use_avx2();
  chunked(n, [&](int64_t lo, int64_t len) {
    (simd ? avx2::gelu_backward : scalar::gelu_backward)(dinp + lo, inp + lo, dout + lo, len);
  });
}

void swiglu_forward(float* out, const float* gate_up, int64_t rows, int I) {
  bool simd = use_avx2();
  parallel_for(0, rows, [&](int64_t r) {
    const float* g = gate_up + r * 2 * I;
    (simd ? avx2::swiglu_row : scalar::swiglu_row)(out + r * I, g, g + I, I);
  });
}

void swiglu_backward(float* dgate_up, const float* gate_up, const float* dout, int64_t rows, int I) {
  bool simd = use_avx2();
  parallel_for(0, rows, [&](int64_t r) {
    const float* g = gate_up + r * 2 * I;
    float* dg = dgate_up + r * 2 * I;
    (simd ? avx2::swiglu_backward_row : scalar::swiglu_backward_row)(dg, dg + I, g, g + I, dout + r * I, I);
  });
}

void geglu_forward(float* out, const float* gate_up, int64_t rows, int I) {
  bool simd = use_avx2();
  parallel_for(0, rows, [&](int64_t r) {
    const float* g = gate_up + r * 2 * I;
    (simd ? avx2::geglu_row : scalar::geglu_row)(out + r * I, g, g + I, I);
  });
}

void geglu_backward(float* dgate_up, const float* gate_up, const float* dout, int64_t rows, int I) {
  bool simd = use_avx2();
  parallel_for(0, rows, [&](int64_t r) {
    const float* g = gate_up + r * 2 * I;
    float* dg = dgate_up + r * 2 * I;
    (simd ? avx2::geglu_backward_row : scalar::geglu_backward_row)(dg, dg + I, g, g + I, dout + r * I, I);
  });
}

}  // namespace distllm::kernels
