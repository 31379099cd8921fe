#include "distllm/kernels/linear_bi.h"
#include "distllm/kernels/simd_avx2.h"

namespace distllm::kernels::avx2 {

namespace {

// MR x rows against 4 weight rows: 12 accumulators. Each output's accumulator sees
// the k-chunks in ascending order and nothing else, so the tiling cannot change it.
template <int MR>
inline void tile4(float* out, int64_t ldo, const float* x, int64_t ldx, const float* w0, int K, const float* bias,
                  int n) {
  __m256 acc[MR][4];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm256_setzero_ps();
  const int64_t wstride = K;
  const int k8 = K & ~7;
  for (int k = 0; k < k8; k += 8) {
    __m256 xv[MR];
    for (int r = 0; r < MR; ++r) xv[r] = _mm256_loadu_ps(x + r * ldx + k);
    for (int j = 0; j < 4; ++j) {
      __m256 wv = _mm256_loadu_ps(w0 + j * wstride + k);
      for (int r = 0; r < MR; ++r) acc[r][j] = _mm256_fmadd_ps(xv[r], wv, acc[r][j]);
    }
  }
  if (k8 < K) {
    __m256i m = simd::tail_mask(K - k8);
    __m256 xv[MR];
    for (int r = 0; r < MR; ++r) xv[r] = _mm256_maskload_ps(x + r * ldx + k8, m);
    for (int j = 0; j < 4; ++j) {
      __m256 wv = _mm256_maskload_ps(w0 + j * wstride + k8, m);
      for (int r = 0; r < MR; ++r) acc[r][j] = _mm256_fmadd_ps(xv[r], wv, acc[r][j]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < 4; ++j) out[r * ldo + n + j] = simd::hsum(acc[r][j]) + (bias ? bias[n + j] : 0.0f);
}

// The same arithmetic for a single weight row (the ragged end of N).
template <int MR>
inline void tile1(float* out, int64_t ldo, const float* x, int64_t ldx, const float* w, int K, const float* bias,
                  int n) {
  __m256 acc[MR];
  for (int r = 0; r < MR; ++r) acc[r] = _mm256_setzero_ps();
  const int k8 = K & ~7;
  for (int k = 0; k < k8; k += 8) {
    __m256 wv = _mm256_loadu_ps(w + k);
    for (int r = 0; r < MR; ++r) acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * ldx + k), wv, acc[r]);
  }
  if (k8 < K) {
    __m256i m = simd::tail_mask(K - k8);
    __m256 wv = _mm256_maskload_ps(w + k8, m);
    for (int r = 0; r < MR; ++r) acc[r] = _mm256_fmadd_ps(_mm256_maskload_ps(x + r * ldx + k8, m), wv, acc[r]);
  }
  for (int r = 0; r < MR; ++r) out[r * ldo + n] = simd::hsum(acc[r]) + (bias ? bias[n] : 0.0f);
}

template <int MR>
void tile_rows(float* out, int64_t ldo, const float* x, int64_t ldx, const float* weight, const float* bias, int K,
               int n0, int n1) {
  int n = n0;
  for (; n + 4 <= n1; n += 4) tile4<MR>(out, ldo, x, ldx, weight + static_cast<int64_t>(n) * K, K, bias, n);
  for (; n < n1; ++n) tile1<MR>(out, ldo, x, ldx, weight + static_cast<int64_t>(n) * K, K, bias, n);
}

}  // namespace

void linear_bi_tile(float* out, int64_t ldo, const float* x, int64_t ldx, const float* weight, const float* bias,
                    int mr, int K, int n0, int n1) {
  switch (mr) {
    case 1: tile_rows<1>(out, ldo, x, ldx, weight, bias, K, n0, n1); break;
    case 2: tile_rows<2>(out, ldo, x, ldx, weight, bias, K, n0, n1); break;
    default: tile_rows<3>(out, ldo, x, ldx, weight, bias, K, n0, n1); break;
  }
}

}  // namespace distllm::kernels::avx2
