// AVX-512 sgemm: the 12 x 32 micro-kernel (24 zmm accumulators; per k two 16-wide
// loads of the B panel and 12 broadcasts of A) and packing routines that transpose
// 16 x 16 blocks in registers (A stored row-major and B stored transposed must be
// turned k-major; element-by-element copies cost as much as 10% of a product).
// The transpose and the tile store are shared with the bf16 kernel
// (gemm_avx512_common.h).
// g++ 12's AVX-512 headers build some intrinsics (unpack, shuffle_f32x4) from
// _mm512_undefined_ps() and then warn about it when inlined: a header bug, not ours.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "distllm/kernels/gemm.h"
#include "distllm/kernels/gemm_avx512_common.h"

namespace distllm::kernels::detail::avx512 {

void gemm_kernel(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, float alpha, float beta) {
  static_assert(kNR == 32, "prefetch_b_row reads 32-wide rows");
  constexpr int MR = kMR;
  __m512 acc0[MR], acc1[MR];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
    prefetch_b_row(b);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i]);
      acc0[i] = _mm512_fmadd_ps(ai, b0, acc0[i]);
      acc1[i] = _mm512_fmadd_ps(ai, b1, acc1[i]);
    }
    a += MR;
    b += kNR;
  }
  store_tile<MR>(acc0, acc1, c, ldc, alpha, beta);
}

namespace {

// Reads rows i < rows (each `kcount` <= 16 floats, lds apart; missing rows are
// zero) and writes column k of that block, masked by store_mask, to d + k * ldd for
// k < kcount.
inline void transpose16(const float* s, int64_t lds, int rows, int kcount, float* d, int64_t ldd,
                        __mmask16 store_mask) {
  const __mmask16 kmask = first_lanes(kcount);
  __m512 r[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) r[i] = i < rows ? _mm512_maskz_loadu_ps(kmask, s + i * lds) : _mm512_setzero_ps();
  __m512 out[16];
  transpose16x16(r, out);
  for (int k = 0; k < kcount; ++k) _mm512_mask_storeu_ps(d + k * ldd, store_mask, out[k]);
}

}  // namespace

void pack_a(float* dst, const float* A, int64_t lda, bool trans, int64_t i0, int64_t mc, int64_t k0, int64_t kc) {
  constexpr int MR = kMR;
  static_assert(MR <= 16, "one masked vector per k");
  for (int64_t p = 0; p < mc; p += MR) {
    const int rows = static_cast<int>(std::min<int64_t>(MR, mc - p));
    float* d = dst + p * kc;
    if (trans) {  // op(A)(i, k) = A[k * lda + i]: MR contiguous values per k
      const __mmask16 m = first_lanes(rows);
      const float* s = A + k0 * lda + i0 + p;
      for (int64_t k = 0; k < kc; ++k, s += lda, d += MR)
        _mm512_mask_storeu_ps(d, first_lanes(MR), _mm512_maskz_loadu_ps(m, s));
    } else {  // rows of A: transpose 16-deep blocks
      const float* s = A + (i0 + p) * lda + k0;
      for (int64_t k = 0; k < kc; k += 16)
        transpose16(s + k, lda, rows, static_cast<int>(std::min<int64_t>(16, kc - k)), d + k * MR, MR,
                    first_lanes(MR));
    }
  }
}

void pack_b(float* dst, const float* B, int64_t ldb, bool trans, int64_t k0, int64_t kc, int64_t j0, int64_t nc) {
  constexpr int NR = kNR;
  for (int64_t p = 0; p < nc; p += NR) {
    const int cols = static_cast<int>(std::min<int64_t>(NR, nc - p));
    float* d = dst + p * kc;
    if (!trans) {  // op(B)(k, j) = B[k * ldb + j]: NR contiguous values per k
      const float* s = B + k0 * ldb + j0 + p;
      const __mmask16 m0 = first_lanes(cols), m1 = first_lanes(cols - 16);
      for (int64_t k = 0; k < kc; ++k, s += ldb, d += NR) {
        _mm512_store_ps(d, _mm512_maskz_loadu_ps(m0, s));
        _mm512_store_ps(d + 16, _mm512_maskz_loadu_ps(m1, s + 16));
      }
    } else {  // columns of op(B) are rows of B: transpose 16 x 16 blocks
      const float* s = B + (j0 + p) * ldb + k0;
      for (int h = 0; h < NR / 16; ++h) {
        const int rows = std::clamp(cols - 16 * h, 0, 16);
        for (int64_t k = 0; k < kc; k += 16)
          transpose16(s + 16 * h * ldb + k, ldb, rows, static_cast<int>(std::min<int64_t>(16, kc - k)),
                      d + k * NR + 16 * h, NR, 0xFFFF);
      }
    }
  }
}

}  // namespace distllm::kernels::detail::avx512
