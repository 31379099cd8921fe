#include "distllm/kernels/activation.h"
#include "distllm/kernels/simd_avx2.h"

namespace distllm::kernels::avx2 {

namespace {

const float kSqrt2OverPi = 0.7978845608028654f;
const float kGeluCoeff = 0.044715f;

template <typename F>
inline void each8(int64_t n, F&& f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) f(i, _mm256_set1_epi32(-1));
  if (i < n) f(i, simd::tail_mask(static_cast<int>(n - i)));
}

inline __m256 sigmoid(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, simd::exp(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}


inline __m256 gelu(__m256 x) {
  const __m256 c0 = _mm256_set1_ps(kSqrt2OverPi), c1 = _mm256_set1_ps(kGeluCoeff);
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
  __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
  __m256 u = _mm256_mul_ps(c0, _mm256_fmadd_ps(c1, x3, x));
  return _mm256_mul_ps(_mm256_mul_ps(half, x), _mm256_add_ps(one, simd::tanh(u)));
}

inline __m256 gelu_grad(__m256 x) {
  const __m256 c0 = _mm256_set1_ps(kSqrt2OverPi), c1 = _mm256_set1_ps(kGeluCoeff);
  const __m256 c3 = _mm256_set1_ps(3.0f * kGeluCoeff);
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
  __m256 x2 = _mm256_mul_ps(x, x);
  __m256 u = _mm256_mul_ps(c0, _mm256_fmadd_ps(_mm256_mul_ps(c1, x2), x, x));
  __m256 t = simd::tanh(u);
  __m256 sech2 = _mm256_fnmadd_ps(t, t, one);
  __m256 du = _mm256_mul_ps(c0, _mm256_fmadd_ps(c3, x2, one));
  return _mm256_fmadd_ps(_mm256_mul_ps(_mm256_mul_ps(half, x), sech2), du, _mm256_mul_ps(half, _mm256_add_ps(one, t)));
}

}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n) {
  each8(n, [&](int64_t i, __m256i m) { _mm256_maskstore_ps(out + i, m, gelu(_mm256_maskload_ps(inp + i, m))); });
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  each8(n, [&](int64_t i, __m256i m) {
    __m256 local = gelu_grad(_mm256_maskload_ps(inp + i, m));
    _mm256_maskstore_ps(dinp + i, m, _mm256_mul_ps(_mm256_maskload_ps(dout + i, m), local));
  });
}

void geglu_row(float* out, const float* gate, const float* up, int n) {
  each8(n, [&](int64_t i, __m256i m) {
    __m256 y = _mm256_mul_ps(gelu(_mm256_maskload_ps(gate + i, m)), _mm256_maskload_ps(up + i, m));
    _mm256_maskstore_ps(out + i, m, y);
  });
}

void geglu_backward_row(float* dgate, float* dup, const float* gate, const float* up, const float* dout, int n) {
  each8(n, [&](int64_t i, __m256i m) {
    __m256 g = _mm256_maskload_ps(gate + i, m);
    __m256 d = _mm256_maskload_ps(dout + i, m);
    __m256 dg = _mm256_mul_ps(_mm256_mul_ps(d, _mm256_maskload_ps(up + i, m)), gelu_grad(g));
    _mm256_maskstore_ps(dup + i, m, _mm256_mul_ps(d, gelu(g)));
    _mm256_maskstore_ps(dgate + i, m, dg);
  });
}

void swiglu_row(float* out, const float* gate, const float* up, int n) {
  each8(n, [&](int64_t i, __m256i m) {
    __m256 g = _mm256_maskload_ps(gate + i, m);
    __m256 y = _mm256_mul_ps(_mm256_mul_ps(g, sigmoid(g)), _mm256_maskload_ps(up + i, m));
    _mm256_maskstore_ps(out + i, m, y);
  });
}

void swiglu_backward_row(float* dgate, float* dup, const float* gate, const float* up, const float* dout, int n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  each8(n, [&](int64_t i, __m256i m) {
    __m256 g = _mm256_maskload_ps(gate + i, m);
    __m256 u = _mm256_maskload_ps(up + i, m);
    __m256 d = _mm256_maskload_ps(dout + i, m);
    __m256 sig = sigmoid(g);
    _mm256_maskstore_ps(dup + i, m, _mm256_mul_ps(d, _mm256_mul_ps(g, sig)));
    __m256 dsilu = _mm256_mul_ps(sig, _mm256_fmadd_ps(g, _mm256_sub_ps(one, sig), one));
    _mm256_maskstore_ps(dgate + i, m, _mm256_mul_ps(_mm256_mul_ps(d, u), dsilu));
  });
}

}  // namespace distllm::kernels::avx2
