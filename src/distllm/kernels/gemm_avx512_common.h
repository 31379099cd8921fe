// Pieces shared by the AVX-512 GEMM micro-kernels (gemm_avx512.cpp, f32 FMAs, and
// gemm_bf16_avx512.cpp, bf16 dot products): the in-register 16 x 16 transpose the
// packing routines use, and the MR x 32 tile's alpha/beta store. Include only from
// files compiled for AVX-512 (*_avx512.cpp).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace distllm::kernels::detail::avx512 {

// Lanes 0..n-1 of a 16-lane vector (n clamped to [0, 16]): with n and n - 16, the
// two halves of a 32-wide row.
inline __mmask16 first_lanes(int n) {
  return static_cast<__mmask16>(n >= 16 ? 0xFFFF : n <= 0 ? 0 : (1u << n) - 1);
}

// out[k] = column k of the 16 x 16 block whose row i is r[i] (32-bit lanes; the bits
// move unchanged, so the lanes may hold pairs of bf16 as well as floats).
inline void transpose16x16(const __m512 r[16], __m512 out[16]) {
  __m512 t[16], u[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // u[4g + q]: within each 128-bit lane L, element k = 4L + q of rows 4g..4g+3.
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    u[4 * g + 0] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
    u[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
    u[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
    u[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
  }
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    __m512 v = _mm512_shuffle_f32x4(u[q], u[4 + q], 0x88);  // k = q, 8+q of rows 0-7
    __m512 w = _mm512_shuffle_f32x4(u[q], u[4 + q], 0xDD);  // k = 4+q, 12+q of rows 0-7
    __m512 x = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0x88);
    __m512 y = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0xDD);
    out[q] = _mm512_shuffle_f32x4(v, x, 0x88);
    out[8 + q] = _mm512_shuffle_f32x4(v, x, 0xDD);
    out[4 + q] = _mm512_shuffle_f32x4(w, y, 0x88);
    out[12 + q] = _mm512_shuffle_f32x4(w, y, 0xDD);
  }
}

// Both cache lines of the B panel's 32-wide row kPrefetchRows rows past `b`, into L1.
// B's KC x NC slice streams from L2 through the micro-kernel (gemm.cpp); the
// hardware prefetchers alone left the micro-kernel waiting on L2, and the earlier
// code prefetched only one of each row's two lines. Both lines,
// 12 rows ahead: +5-6% on 2-thread 2048^3 while a neighbour loads the caches,
// +1% when quiet (docs/benchmarks.md, "GEMM"); 8, 16 and 24 rows measured alike.
inline constexpr int kPrefetchRows = 12;
inline void prefetch_b_row(const float* b) {
  _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchRows * 32), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchRows * 32 + 16), _MM_HINT_T0);
}

// C[0:MR, 0:32] = alpha · acc + beta · C (beta == 0: C not read); acc0 holds
// columns 0-15, acc1 columns 16-31.
template <int MR>
inline void store_tile(const __m512 (&acc0)[MR], const __m512 (&acc1)[MR], float* c, int64_t ldc, float alpha,
                       float beta) {
  const __m512 va = _mm512_set1_ps(alpha);
  if (beta == 0.0f) {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      _mm512_storeu_ps(c + i * ldc, _mm512_mul_ps(va, acc0[i]));
      _mm512_storeu_ps(c + i * ldc + 16, _mm512_mul_ps(va, acc1[i]));
    }
  } else {
    const __m512 vb = _mm512_set1_ps(beta);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      float* ci = c + i * ldc;
      _mm512_storeu_ps(ci, _mm512_fmadd_ps(va, acc0[i], _mm512_mul_ps(vb, _mm512_loadu_ps(ci))));
      _mm512_storeu_ps(ci + 16, _mm512_fmadd_ps(va, acc1[i], _mm512_mul_ps(vb, _mm512_loadu_ps(ci + 16))));
    }
  }
}

}  // namespace distllm::kernels::detail::avx512
