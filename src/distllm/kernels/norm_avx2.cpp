#include <cmath>

#include "distllm/kernels/norm.h"
#include "distllm/kernels/simd_avx2.h"

namespace distllm::kernels::avx2 {

namespace {

// Applies f(offset, lane_mask) over [0, n) in steps of 8; the last step is masked.
template <typename F>
inline void each8(int n, F&& f) {
  int i = 0;
  for (; i + 8 <= n; i += 8) f(i, _mm256_set1_epi32(-1));
  if (i < n) f(i, simd::tail_mask(n - i));
}

inline __m256 load(const float* p, __m256i m) { return _mm256_maskload_ps(p, m); }
inline void store(float* p, __m256i m, __m256 v) { _mm256_maskstore_ps(p, m, v); }

}  // namespace

void layernorm_row(float* out, float* mean_out, float* rstd_out, const float* x, const float* w,
                   const float* b, int C, float eps) {
  __m256 acc = _mm256_setzero_ps();
  each8(C, [&](int i, __m256i m) { acc = _mm256_add_ps(acc, load(x + i, m)); });
  float mean = simd::hsum(acc) / C;
  __m256 vmean = _mm256_set1_ps(mean);
  __m256 vacc = _mm256_setzero_ps();
  each8(C, [&](int i, __m256i m) {
    __m256 d = _mm256_and_ps(_mm256_sub_ps(load(x + i, m), vmean), _mm256_castsi256_ps(m));
    vacc = _mm256_fmadd_ps(d, d, vacc);
  });
  float rstd = 1.0f / std::sqrt(simd::hsum(vacc) / C + eps);
  __m256 vrstd = _mm256_set1_ps(rstd);
  each8(C, [&](int i, __m256i m) {
    __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(load(x + i, m), vmean), vrstd);
    __m256 y = _mm256_mul_ps(xhat, load(w + i, m));
    if (b) y = _mm256_add_ps(y, load(b + i, m));
    store(out + i, m, y);
  });
  if (mean_out) *mean_out = mean;
  if (rstd_out) *rstd_out = rstd;
}

void layernorm_backward_row(float* dx, const float* dout, const float* x, const float* w, float mean,
                            float rstd, int C) {
  __m256 vmean = _mm256_set1_ps(mean), vrstd = _mm256_set1_ps(rstd);
  __m256 acc_d = _mm256_setzero_ps(), acc_dx = _mm256_setzero_ps();
  each8(C, [&](int i, __m256i m) {
    __m256 dnorm = _mm256_mul_ps(load(dout + i, m), load(w + i, m));
    __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(load(x + i, m), vmean), vrstd);
    acc_d = _mm256_add_ps(acc_d, dnorm);
    acc_dx = _mm256_fmadd_ps(dnorm, xhat, acc_dx);
  });
  __m256 dmean = _mm256_set1_ps(simd::hsum(acc_d) / C);
  __m256 dxmean = _mm256_set1_ps(simd::hsum(acc_dx) / C);
  each8(C, [&](int i, __m256i m) {
    __m256 dnorm = _mm256_mul_ps(load(dout + i, m), load(w + i, m));
    __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(load(x + i, m), vmean), vrstd);
    __m256 g = _mm256_sub_ps(_mm256_sub_ps(dnorm, dmean), _mm256_mul_ps(xhat, dxmean));
    store(dx + i, m, _mm256_fmadd_ps(vrstd, g, load(dx + i, m)));
  });
}

void layernorm_param_grad_row(float* dw, float* db, const float* dout, const float* x, float mean, float rstd,
                              int n) {
  __m256 vmean = _mm256_set1_ps(mean), vrstd = _mm256_set1_ps(rstd);
  each8(n, [&](int i, __m256i m) {
    __m256 d = load(dout + i, m);
    if (dw) {
      __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(load(x + i, m), vmean), vrstd);
      store(dw + i, m, _mm256_fmadd_ps(d, xhat, load(dw + i, m)));
    }
    if (db) store(db + i, m, _mm256_add_ps(load(db + i, m), d));
  });
}

namespace {

// The weight a row is scaled by: w, or 1 + w for Gemma's norm.
template <bool kPlusOne>
inline __m256 norm_weight(const float* w, __m256i m) {
  if constexpr (kPlusOne) return _mm256_add_ps(_mm256_set1_ps(1.0f), load(w, m));
  else return load(w, m);
}

template <bool kPlusOne>
void rmsnorm_row_impl(float* out, float* rstd_out, const float* x, const float* w, int C, float eps) {
  __m256 acc = _mm256_setzero_ps();
  each8(C, [&](int i, __m256i m) {
    __m256 v = load(x + i, m);
    acc = _mm256_fmadd_ps(v, v, acc);
  });
  float rstd = 1.0f / std::sqrt(simd::hsum(acc) / C + eps);
  __m256 vrstd = _mm256_set1_ps(rstd);
  each8(C, [&](int i, __m256i m) {
    store(out + i, m, _mm256_mul_ps(_mm256_mul_ps(load(x + i, m), vrstd), norm_weight<kPlusOne>(w + i, m)));
  });
  if (rstd_out) *rstd_out = rstd;
}

template <bool kPlusOne>
void rmsnorm_backward_row_impl(float* dx, const float* dout, const float* x, const float* w, float rstd, int C) {
  __m256 acc = _mm256_setzero_ps();
  each8(C, [&](int i, __m256i m) {
    acc = _mm256_fmadd_ps(_mm256_mul_ps(load(dout + i, m), norm_weight<kPlusOne>(w + i, m)), load(x + i, m), acc);
  });
  __m256 coef = _mm256_set1_ps(rstd * rstd * simd::hsum(acc) / C);
  __m256 vrstd = _mm256_set1_ps(rstd);
  each8(C, [&](int i, __m256i m) {
    __m256 g =
        _mm256_fnmadd_ps(load(x + i, m), coef, _mm256_mul_ps(load(dout + i, m), norm_weight<kPlusOne>(w + i, m)));
    store(dx + i, m, _mm256_fmadd_ps(vrstd, g, load(dx + i, m)));
  });
}

}  // namespace

void rmsnorm_row(float* out, float* rstd_out, const float* x, const float* w, int C, float eps) {
  rmsnorm_row_impl<false>(out, rstd_out, x, w, C, eps);
}

void rmsnorm_backward_row(float* dx, const float* dout, const float* x, const float* w, float rstd, int C) {
  rmsnorm_backward_row_impl<false>(dx, dout, x, w, rstd, C);
}

void rmsnorm_plus_one_row(float* out, float* rstd_out, const float* x, const float* w, int C, float eps) {
  rmsnorm_row_impl<true>(out, rstd_out, x, w, C, eps);
}

void rmsnorm_plus_one_backward_row(float* dx, const float* dout, const float* x, const float* w, float rstd,
                                   int C) {
  rmsnorm_backward_row_impl<true>(dx, dout, x, w, rstd, C);
}

void rmsnorm_param_grad_row(float* dw, const float* dout, const float* x, float rstd, int n) {
  __m256 vrstd = _mm256_set1_ps(rstd);
  each8(n, [&](int i, __m256i m) {
    __m256 g = _mm256_mul_ps(_mm256_mul_ps(load(dout + i, m), load(x + i, m)), vrstd);
    store(dw + i, m, _mm256_add_ps(load(dw + i, m), g));
  });
}

}  // namespace distllm::kernels::avx2
